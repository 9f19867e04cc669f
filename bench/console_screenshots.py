"""Screenshots of the operator's console and of a data owner's ledger report, taken while following
deploy/README.md's one-machine walkthrough ("5. Watching") step by step with the real commands.

    python bench/console_screenshots.py [--out docs/console] [--keep DIR]

Makes a CA and certificates (deploy/provision-certs.sh), three parties' data (the bundled segmentation
set split in three), runs ``dpfed coordinator serve`` with the console and metrics on, three ``dpfed party
serve`` processes, submits a GMLVQ job with ``dpfed job submit``, and photographs each console page in
headless Chromium (Debian's chromium + chromium-driver, through selenium): the federation, the jobs page
mid-job, the job's page, the budgets after the job; then ``dpfed party ledger --html`` of one party and a
photograph of that page. Prints a table of what it wrote. Not a test: the tests never save screenshots.
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "support"))  # the browser set-up the browser test uses

from browser import Browser  # noqa: E402

PARTIES = ("party-a", "party-b", "party-c")
JOB = ["--algorithm", "gmlvq", "--epsilon", "1", "--param", "epochs=5", "--param", "sampling_rate=0.02"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _dpfed(*args: str, cwd: Path, env: dict, check: bool = True) -> str:
    out = subprocess.run([sys.executable, "-m", "dpfed.cli", *args], cwd=cwd, env=env, capture_output=True,
                         text=True, timeout=600)
    if check and out.returncode != 0:
        raise RuntimeError(f"dpfed {' '.join(args)} failed: {out.stderr}")
    return out.stdout


def _setup(work: Path, env: dict) -> tuple[int, int, int]:
    """The walkthrough's files: data, certificates, coordinator.toml and one party.toml per party."""
    import numpy as np

    from dpfed.data.datasets import load_dataset, split_parties

    (work / "data").mkdir(parents=True)
    ds = load_dataset("segmentation")
    for name, (X, y) in zip(PARTIES, split_parties(ds.X_train, ds.y_train, 3, "iid"), strict=True):
        np.savez(work / "data" / f"{name}.npz", X=X, y=y)
    (work / "data" / "schema.json").write_text(ds.schema.to_json())
    subprocess.run(["bash", str(ROOT / "deploy" / "provision-certs.sh"), "certs", "127.0.0.1", *PARTIES], cwd=work,
                   env=env, check=True, capture_output=True, timeout=300)
    grpc_port, console_port, metrics_port = _free_port(), _free_port(), _free_port()
    (work / "coordinator.toml").write_text(
        f'listen = "127.0.0.1:{grpc_port}"\nstate_dir = "state"\nconsole_port = {console_port}\n'
        f'metrics_port = {metrics_port}\n[tls]\nca = "certs/coordinator/ca.crt"\n'
        'cert = "certs/coordinator/coordinator.crt"\nkey = "certs/coordinator/coordinator.key"\n')
    for p in PARTIES:  # what the walkthrough's sed line does to deploy/compose/PARTY.toml
        text = (ROOT / "deploy" / "compose" / f"{p}.toml").read_text()
        text = text.replace("/certs/", f"certs/{p}/").replace("/data/", "data/").replace("/state/", f"state-{p}/")
        text = text.replace("coordinator:50051", f"127.0.0.1:{grpc_port}")
        (work / f"{p}.toml").write_text(text)
        (work / f"state-{p}").mkdir()
    return grpc_port, console_port, metrics_port


def _wait_for(pred, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            raise TimeoutError(f"waited {timeout:g} s for {what}")
        time.sleep(0.2)


def _scrape(work: Path, port: int) -> str:
    """GET /metrics with the operator certificate, as the walkthrough's curl line does."""
    import ssl
    import urllib.request

    ctx = ssl.create_default_context(cafile=str(work / "certs" / "ca" / "ca.crt"))
    ctx.load_cert_chain(str(work / "certs" / "operator" / "operator.crt"), str(work / "certs" / "operator" / "operator.key"))
    with urllib.request.urlopen(f"https://127.0.0.1:{port}/metrics", context=ctx, timeout=30) as r:
        return r.read().decode()


def _rows(driver) -> list:
    return driver.execute_script(
        "return Array.from(document.querySelectorAll('table.jobs span.round')).map(e => +e.dataset.round)")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(ROOT / "docs" / "console"), help="where the PNGs go")
    ap.add_argument("--keep", default=None, help="run in this (new) folder and keep it")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    work = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="dpfed-console-"))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    grpc_port, console_port, metrics_port = _setup(work, env)
    procs = [subprocess.Popen([sys.executable, "-m", "dpfed.cli", "coordinator", "serve", "--config",
                               "coordinator.toml"], cwd=work, env=env, stdout=subprocess.DEVNULL,
                              stderr=open(work / "coordinator.log", "w"))]
    browser = None
    shots: list[tuple[str, str]] = []
    try:
        _wait_for(lambda: socket.socket().connect_ex(("127.0.0.1", console_port)) == 0, 60, "the console")
        procs += [subprocess.Popen([sys.executable, "-m", "dpfed.cli", "party", "serve", "--config", f"{p}.toml"],
                                   cwd=work, env=env, stdout=subprocess.DEVNULL, stderr=open(work / f"{p}.log", "w"))
                  for p in PARTIES]
        token = _dpfed("certs", "token", "operator", "--ca", "certs/ca", cwd=work, env=env).strip()
        browser = Browser(work / "certs" / "coordinator" / "coordinator.crt", 1280, 760)
        d, base = browser.driver, f"https://127.0.0.1:{console_port}"
        d.get(f"{base}/federation?token={token}&refresh=0.5")
        _wait_for(lambda: d.execute_script("return document.querySelectorAll('span.ok').length") == 3, 120,
                  "three parties connected")

        def shot(name: str, what: str) -> None:
            path = out / f"{name}.png"
            d.save_screenshot(str(path))
            shots.append((str(path.relative_to(ROOT) if path.is_relative_to(ROOT) else path), what))

        shot("federation", "the federation: three parties connected, their certificates and budgets")
        admin = ["--coordinator", f"127.0.0.1:{grpc_port}", "--cert", "certs/operator/operator.crt"]
        job = _dpfed("job", "submit", *JOB, *admin, cwd=work, env=env).strip().splitlines()[-1]
        d.get(f"{base}/jobs?refresh=0.5")
        _wait_for(lambda: any(r >= 60 for r in _rows(d)), 600, "the job under way")
        shot("jobs", "the jobs page while the GMLVQ job runs (round r of T, time left)")
        d.get(f"{base}/job/{job}?refresh=0.5")
        _wait_for(lambda: "done" in d.find_element("css selector", "span.state").text, 900, "the job to finish")
        d.refresh()
        shot("job", "the job's page after it finished: rounds over time, answer bytes per round")
        _dpfed("job", "submit", "--algorithm", "naive-bayes", "--epsilon", "0.5", "--wait", *admin, cwd=work, env=env)
        d.get(f"{base}/budgets")
        shot("budgets", "every party's spent epsilon against its limit, and over time (two jobs)")
        _dpfed("party", "ledger", "--config", "party-a.toml", "--html", str(work / "ledger-party-a.html"),
               cwd=work, env=env)
        d.get((work / "ledger-party-a.html").as_uri())
        shot("ledger", "dpfed party ledger --html: party-a's own account of what it released")
        metrics = _scrape(work, metrics_port)
        print("\n".join(x for x in metrics.splitlines() if x.startswith(("dpfed_rounds_total", "dpfed_jobs_finished"))))
    finally:
        if browser is not None:
            browser.quit()
        for p in reversed(procs):
            p.terminate()
        for p in procs:
            p.wait(timeout=30)
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    print("| file | what |\n|---|---|")
    for path, what in shots:
        print(f"| `{path}` | {re.sub(r'[|]', '/', what)} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
