#!/usr/bin/env python3
"""Submit a plan to a quietbench service and print its events as they come.

The client code is generated from proto/quietbench/v1/controller.proto with grpcio-tools
(at start, into a temporary folder: no generated file to keep in step by hand).

    pip install grpcio==1.85.1 grpcio-tools==1.85.1
    python3 examples/python/submit_plan.py --controller 127.0.0.1:7710 plan.toml
    # over mutual TLS, with a client certificate (quietbench certs issue --client NAME):
    python3 examples/python/submit_plan.py --controller host:7710 \
        --ca certs/ca.pem --cert certs/client-ci.pem --key certs/client-ci.key plan.toml

Prints one line per event (queued, started, host, trial with its figures, warning, log), then
the run's table and verdicts, and exits with the run's exit code. The JSON report is then
fetched and its schema printed, as a dashboard would.
"""

import argparse
import importlib
import json
import pathlib
import sys
import tempfile

import grpc
from grpc_tools import protoc

REPO = pathlib.Path(__file__).resolve().parents[2]
PROTO_ROOT = REPO / "proto"


def generated_modules():
    """Compiles controller.proto and imports its messages and stubs."""
    out = pathlib.Path(tempfile.mkdtemp(prefix="quietbench-proto-"))
    include = pathlib.Path(protoc.__file__).parent / "_proto"
    status = protoc.main([
        "grpc_tools.protoc",
        f"-I{PROTO_ROOT}",
        f"-I{include}",
        f"--python_out={out}",
        f"--grpc_python_out={out}",
        str(PROTO_ROOT / "quietbench/v1/controller.proto"),
    ])
    if status != 0:
        sys.exit(f"error: protoc could not compile controller.proto (status {status})")
    sys.path.insert(0, str(out))
    pb = importlib.import_module("quietbench.v1.controller_pb2")
    stubs = importlib.import_module("quietbench.v1.controller_pb2_grpc")
    return pb, stubs


def channel(args):
    if args.ca is None:
        return grpc.insecure_channel(args.controller)
    credentials = grpc.ssl_channel_credentials(
        root_certificates=pathlib.Path(args.ca).read_bytes(),
        private_key=pathlib.Path(args.key).read_bytes(),
        certificate_chain=pathlib.Path(args.cert).read_bytes(),
    )
    return grpc.secure_channel(args.controller, credentials)


def describe(event):
    kind = event.WhichOneof("event")
    e = getattr(event, kind)
    if kind == "queued":
        return f"queued: {e.reason}"
    if kind == "started":
        return "resumed" if e.resumed else "started"
    if kind == "host":
        return f"host {e.index}: {e.address} ({e.cpu_model})"
    if kind == "trial":
        figures = ", ".join(
            f"{f.metric}={f.value:.6g} {f.unit}" if f.HasField("value") else f"{f.metric}=-"
            for f in e.figures
        )
        warmup = " warm-up" if e.warmup else ""
        return f"trial {e.seq}: host {e.host} {e.variant} round {e.round}{warmup}: {figures}"
    if kind in ("warning", "log"):
        return f"{kind}: {e.text}"
    return kind


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("plan", help="the plan file (TOML, docs/plans.md)")
    parser.add_argument("--controller", required=True, help="the service, HOST:PORT")
    parser.add_argument("--ca", help="CA certificate (mutual TLS)")
    parser.add_argument("--cert", help="this client's certificate")
    parser.add_argument("--key", help="this client's key")
    args = parser.parse_args()
    if (args.ca is None) != (args.cert is None) or (args.cert is None) != (args.key is None):
        parser.error("--ca, --cert and --key go together")

    pb, stubs = generated_modules()
    service = stubs.ControllerStub(channel(args))
    plan = pathlib.Path(args.plan).read_text()
    try:
        accepted = service.SubmitRun(pb.SubmitRunRequest(plan_toml=plan), timeout=30)
    except grpc.RpcError as err:
        sys.exit(f"error: the service refused the plan: {err.code().name}: {err.details()}")
    print(f"submitted run {accepted.run_id} ({accepted.queue_position} ahead of it)", flush=True)

    finished = None
    for event in service.WatchRun(pb.WatchRunRequest(run_id=accepted.run_id)):
        kind = event.WhichOneof("event")
        if kind == "output":
            print(event.output.text, end="", flush=True)
        elif kind == "finished":
            finished = event.finished
        else:
            print(describe(event), flush=True)
    if finished is None:
        sys.exit("error: the event stream ended before the run finished")
    print(f"finished: {finished.status}, exit code {finished.exit_code}"
          + (f": {finished.error}" if finished.error else ""), flush=True)

    if finished.status != "cancelled":
        report = service.GetRunReport(
            pb.GetRunReportRequest(run_id=accepted.run_id, format=pb.REPORT_FORMAT_JSON),
            timeout=60,
        )
        document = json.loads(report.content)
        print(f"report: schema {document.get('schema')}, {len(document.get('trials', []))} trials",
              flush=True)
    sys.exit(finished.exit_code)


if __name__ == "__main__":
    main()
