"""A generic gRPC client's view of a quietbench agent, through reflection v1alpha only.

Python's stock reflection client (grpcio-reflection) speaks grpc.reflection.v1alpha, as many
tools still do. Given the agent's address, this lists the services, resolves every method of
the agent's service (and the types it names) from the descriptors reflection sends, and makes
one real call, GetHost, with message classes built from those descriptors alone: nothing here
was generated from quietbench's .proto files.

Prints one JSON object on stdout; tests/tests/grpc_api.rs runs it and checks it.
Needs: pip install grpcio grpcio-reflection (.ci/run installs pinned versions).
"""

import json
import sys

try:
    import grpc
    from google.protobuf import descriptor_pool, message_factory
    from grpc_reflection.v1alpha.proto_reflection_descriptor_database import (
        ProtoReflectionDescriptorDatabase,
    )
except ImportError as err:
    sys.exit(
        f"python3 lacks a gRPC package ({err}): "
        "pip install grpcio grpcio-reflection (.ci/run does)"
    )

AGENT = "quietbench.v1.AgentService"


def main(address):
    with grpc.insecure_channel(address) as channel:
        grpc.channel_ready_future(channel).result(timeout=30)
        database = ProtoReflectionDescriptorDatabase(channel)
        services = sorted(database.get_services())
        pool = descriptor_pool.DescriptorPool(database)
        agent = pool.FindServiceByName(AGENT)
        methods = {
            m.name: {
                "input": m.input_type.full_name,
                "output": m.output_type.full_name,
                "server_streaming": m.server_streaming,
                "client_streaming": m.client_streaming,
            }
            for m in agent.methods
        }
        get_host = agent.methods_by_name["GetHost"]
        request = message_factory.GetMessageClass(get_host.input_type)
        response = message_factory.GetMessageClass(get_host.output_type)
        call = channel.unary_unary(
            f"/{AGENT}/GetHost",
            request_serializer=request.SerializeToString,
            response_deserializer=response.FromString,
        )
        host = call(request(), timeout=60)
    json.dump(
        {
            "services": services,
            "methods": methods,
            "get_host": {
                "agent_version": host.agent_version,
                "logical_cpus": host.fingerprint.logical_cpus,
            },
        },
        sys.stdout,
    )


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: reflection_v1alpha.py HOST:PORT")
    main(sys.argv[1])
