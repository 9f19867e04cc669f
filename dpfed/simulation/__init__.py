"""Layer 6, simulations: the same party sessions and driver loop in one process
(:func:`run_inprocess`), on Ray (:mod:`dpfed.simulation.ray_runner`) or as local party daemon
processes over gRPC with mutual TLS (:mod:`dpfed.simulation.grpc_local`)."""
from dpfed.simulation.inprocess import PURE_DP_DELTA, SimulationResult, run_inprocess

__all__ = ["PURE_DP_DELTA", "SimulationResult", "run_inprocess"]
