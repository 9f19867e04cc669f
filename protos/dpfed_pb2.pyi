from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ArrayChunk(_message.Message):
    __slots__ = ("name", "dtype", "shape", "total_bytes", "offset", "data")
    NAME_FIELD_NUMBER: _ClassVar[int]
    DTYPE_FIELD_NUMBER: _ClassVar[int]
    SHAPE_FIELD_NUMBER: _ClassVar[int]
    TOTAL_BYTES_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    name: str
    dtype: str
    shape: _containers.RepeatedScalarFieldContainer[int]
    total_bytes: int
    offset: int
    data: bytes
    def __init__(self, name: _Optional[str] = ..., dtype: _Optional[str] = ..., shape: _Optional[_Iterable[int]] = ..., total_bytes: _Optional[int] = ..., offset: _Optional[int] = ..., data: _Optional[bytes] = ...) -> None: ...

class RegisterRequest(_message.Message):
    __slots__ = ("version", "party", "schema_json", "epsilon_limit", "delta_limit", "epsilon_spent", "algorithms", "public_records")
    VERSION_FIELD_NUMBER: _ClassVar[int]
    PARTY_FIELD_NUMBER: _ClassVar[int]
    SCHEMA_JSON_FIELD_NUMBER: _ClassVar[int]
    EPSILON_LIMIT_FIELD_NUMBER: _ClassVar[int]
    DELTA_LIMIT_FIELD_NUMBER: _ClassVar[int]
    EPSILON_SPENT_FIELD_NUMBER: _ClassVar[int]
    ALGORITHMS_FIELD_NUMBER: _ClassVar[int]
    PUBLIC_RECORDS_FIELD_NUMBER: _ClassVar[int]
    version: int
    party: str
    schema_json: str
    epsilon_limit: float
    delta_limit: float
    epsilon_spent: float
    algorithms: _containers.RepeatedScalarFieldContainer[str]
    public_records: int
    def __init__(self, version: _Optional[int] = ..., party: _Optional[str] = ..., schema_json: _Optional[str] = ..., epsilon_limit: _Optional[float] = ..., delta_limit: _Optional[float] = ..., epsilon_spent: _Optional[float] = ..., algorithms: _Optional[_Iterable[str]] = ..., public_records: _Optional[int] = ...) -> None: ...

class RegisterReply(_message.Message):
    __slots__ = ("version", "session", "shard")
    VERSION_FIELD_NUMBER: _ClassVar[int]
    SESSION_FIELD_NUMBER: _ClassVar[int]
    SHARD_FIELD_NUMBER: _ClassVar[int]
    version: int
    session: str
    shard: str
    def __init__(self, version: _Optional[int] = ..., session: _Optional[str] = ..., shard: _Optional[str] = ...) -> None: ...

class StreamRequest(_message.Message):
    __slots__ = ("version", "session")
    VERSION_FIELD_NUMBER: _ClassVar[int]
    SESSION_FIELD_NUMBER: _ClassVar[int]
    version: int
    session: str
    def __init__(self, version: _Optional[int] = ..., session: _Optional[str] = ...) -> None: ...

class JobOffer(_message.Message):
    __slots__ = ("spec_json",)
    SPEC_JSON_FIELD_NUMBER: _ClassVar[int]
    spec_json: str
    def __init__(self, spec_json: _Optional[str] = ...) -> None: ...

class TaskHeader(_message.Message):
    __slots__ = ("kind", "params_json")
    KIND_FIELD_NUMBER: _ClassVar[int]
    PARAMS_JSON_FIELD_NUMBER: _ClassVar[int]
    kind: str
    params_json: str
    def __init__(self, kind: _Optional[str] = ..., params_json: _Optional[str] = ...) -> None: ...

class CoordinatorMessage(_message.Message):
    __slots__ = ("version", "job_id", "round", "task_id", "offer", "task", "job_end", "heartbeat", "chunks", "last")
    VERSION_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    ROUND_FIELD_NUMBER: _ClassVar[int]
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    OFFER_FIELD_NUMBER: _ClassVar[int]
    TASK_FIELD_NUMBER: _ClassVar[int]
    JOB_END_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_FIELD_NUMBER: _ClassVar[int]
    CHUNKS_FIELD_NUMBER: _ClassVar[int]
    LAST_FIELD_NUMBER: _ClassVar[int]
    version: int
    job_id: str
    round: int
    task_id: str
    offer: JobOffer
    task: TaskHeader
    job_end: str
    heartbeat: bool
    chunks: _containers.RepeatedCompositeFieldContainer[ArrayChunk]
    last: bool
    def __init__(self, version: _Optional[int] = ..., job_id: _Optional[str] = ..., round: _Optional[int] = ..., task_id: _Optional[str] = ..., offer: _Optional[_Union[JobOffer, _Mapping]] = ..., task: _Optional[_Union[TaskHeader, _Mapping]] = ..., job_end: _Optional[str] = ..., heartbeat: _Optional[bool] = ..., chunks: _Optional[_Iterable[_Union[ArrayChunk, _Mapping]]] = ..., last: _Optional[bool] = ...) -> None: ...

class JobResponse(_message.Message):
    __slots__ = ("version", "session", "job_id", "round", "task_id", "accept", "reason", "event_json", "epsilon_job", "epsilon_total")
    VERSION_FIELD_NUMBER: _ClassVar[int]
    SESSION_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    ROUND_FIELD_NUMBER: _ClassVar[int]
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    ACCEPT_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    EVENT_JSON_FIELD_NUMBER: _ClassVar[int]
    EPSILON_JOB_FIELD_NUMBER: _ClassVar[int]
    EPSILON_TOTAL_FIELD_NUMBER: _ClassVar[int]
    version: int
    session: str
    job_id: str
    round: int
    task_id: str
    accept: bool
    reason: str
    event_json: str
    epsilon_job: float
    epsilon_total: float
    def __init__(self, version: _Optional[int] = ..., session: _Optional[str] = ..., job_id: _Optional[str] = ..., round: _Optional[int] = ..., task_id: _Optional[str] = ..., accept: _Optional[bool] = ..., reason: _Optional[str] = ..., event_json: _Optional[str] = ..., epsilon_job: _Optional[float] = ..., epsilon_total: _Optional[float] = ...) -> None: ...

class JobResponseAck(_message.Message):
    __slots__ = ("version",)
    VERSION_FIELD_NUMBER: _ClassVar[int]
    version: int
    def __init__(self, version: _Optional[int] = ...) -> None: ...

class ResultPart(_message.Message):
    __slots__ = ("version", "session", "job_id", "round", "task_id", "error", "chunks", "last")
    VERSION_FIELD_NUMBER: _ClassVar[int]
    SESSION_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    ROUND_FIELD_NUMBER: _ClassVar[int]
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    CHUNKS_FIELD_NUMBER: _ClassVar[int]
    LAST_FIELD_NUMBER: _ClassVar[int]
    version: int
    session: str
    job_id: str
    round: int
    task_id: str
    error: str
    chunks: _containers.RepeatedCompositeFieldContainer[ArrayChunk]
    last: bool
    def __init__(self, version: _Optional[int] = ..., session: _Optional[str] = ..., job_id: _Optional[str] = ..., round: _Optional[int] = ..., task_id: _Optional[str] = ..., error: _Optional[str] = ..., chunks: _Optional[_Iterable[_Union[ArrayChunk, _Mapping]]] = ..., last: _Optional[bool] = ...) -> None: ...

class ResultAck(_message.Message):
    __slots__ = ("version",)
    VERSION_FIELD_NUMBER: _ClassVar[int]
    version: int
    def __init__(self, version: _Optional[int] = ...) -> None: ...

class StatusRequest(_message.Message):
    __slots__ = ("version",)
    VERSION_FIELD_NUMBER: _ClassVar[int]
    version: int
    def __init__(self, version: _Optional[int] = ...) -> None: ...

class StatusReply(_message.Message):
    __slots__ = ("version", "status_json")
    VERSION_FIELD_NUMBER: _ClassVar[int]
    STATUS_JSON_FIELD_NUMBER: _ClassVar[int]
    version: int
    status_json: str
    def __init__(self, version: _Optional[int] = ..., status_json: _Optional[str] = ...) -> None: ...

class SubmitJobRequest(_message.Message):
    __slots__ = ("version", "algorithm", "params_json", "schema_json", "parties", "job_id")
    VERSION_FIELD_NUMBER: _ClassVar[int]
    ALGORITHM_FIELD_NUMBER: _ClassVar[int]
    PARAMS_JSON_FIELD_NUMBER: _ClassVar[int]
    SCHEMA_JSON_FIELD_NUMBER: _ClassVar[int]
    PARTIES_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    version: int
    algorithm: str
    params_json: str
    schema_json: str
    parties: _containers.RepeatedScalarFieldContainer[str]
    job_id: str
    def __init__(self, version: _Optional[int] = ..., algorithm: _Optional[str] = ..., params_json: _Optional[str] = ..., schema_json: _Optional[str] = ..., parties: _Optional[_Iterable[str]] = ..., job_id: _Optional[str] = ...) -> None: ...

class SubmitJobReply(_message.Message):
    __slots__ = ("version", "job_id")
    VERSION_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    version: int
    job_id: str
    def __init__(self, version: _Optional[int] = ..., job_id: _Optional[str] = ...) -> None: ...

class JobRequest(_message.Message):
    __slots__ = ("version", "job_id")
    VERSION_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    version: int
    job_id: str
    def __init__(self, version: _Optional[int] = ..., job_id: _Optional[str] = ...) -> None: ...

class JobState(_message.Message):
    __slots__ = ("version", "job_json")
    VERSION_FIELD_NUMBER: _ClassVar[int]
    JOB_JSON_FIELD_NUMBER: _ClassVar[int]
    version: int
    job_json: str
    def __init__(self, version: _Optional[int] = ..., job_json: _Optional[str] = ...) -> None: ...

class ModelPart(_message.Message):
    __slots__ = ("version", "job_id", "job_json", "chunks")
    VERSION_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    JOB_JSON_FIELD_NUMBER: _ClassVar[int]
    CHUNKS_FIELD_NUMBER: _ClassVar[int]
    version: int
    job_id: str
    job_json: str
    chunks: _containers.RepeatedCompositeFieldContainer[ArrayChunk]
    def __init__(self, version: _Optional[int] = ..., job_id: _Optional[str] = ..., job_json: _Optional[str] = ..., chunks: _Optional[_Iterable[_Union[ArrayChunk, _Mapping]]] = ...) -> None: ...
