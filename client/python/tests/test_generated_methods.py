"""Unary rpcs without a hand-written method get one generated from the
service descriptor, in both clients; a hand-written method that goes
missing fails at import."""

import asyncio

import pytest

import gpucompute
from gpucompute._generated_methods import HAND_WRITTEN, add_generated_methods, snake_case
from gpucompute.v1 import compute_pb2 as pb


def without(rpc):
    return {k: v for k, v in HAND_WRITTEN.items() if k != rpc}


def test_snake_case():
    assert snake_case("ListTensors") == "list_tensors"
    assert snake_case("GetServerInfo") == "get_server_info"


def test_every_rpc_is_reachable_from_both_clients():
    service = pb.DESCRIPTOR.services_by_name["Compute"]
    for cls in (gpucompute.Client, gpucompute.aio.Client):
        for rpc in service.methods:
            name = HAND_WRITTEN.get(rpc.name, snake_case(rpc.name))
            assert callable(getattr(cls, name, None)), f"{cls.__module__}: {name} for {rpc.name}"


def test_a_generated_method_calls_its_rpc(server_target):
    # As if ListTensors had no hand-written method: list_tensors is generated.
    class Client(gpucompute.Client):
        pass

    add_generated_methods(
        Client, asynchronous=False, unset=None, hand_written=without("ListTensors")
    )
    with Client(server_target, timeout=30) as client:
        response = client.list_tensors()
        assert isinstance(response, pb.ListTensorsResponse)
        assert response.limit_bytes == client.tensors().limit_bytes
        assert isinstance(client.list_tensors(pb.ListTensorsRequest()), pb.ListTensorsResponse)
        with pytest.raises(TypeError):
            client.list_tensors(pb.ListTensorsRequest(), nonsense=1)


def test_a_generated_async_method_calls_its_rpc(server_target):
    class Client(gpucompute.aio.Client):
        pass

    add_generated_methods(
        Client, asynchronous=True, unset=None, hand_written=without("ReleaseTensors")
    )

    async def main():
        async with Client(server_target, timeout=30) as client:
            response = await client.release_tensors(tensor_ids=["no-such-tensor"])
            assert isinstance(response, pb.ReleaseTensorsResponse)
            assert response.released == 0

    asyncio.run(main())


def test_a_missing_hand_written_method_fails():
    class Bare:
        pass

    with pytest.raises(TypeError, match="lacks matmul"):
        add_generated_methods(Bare, asynchronous=False, unset=None)
