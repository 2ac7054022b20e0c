"""gpucompute.aio mirrors gpucompute: Client, Tensor and SharedMemoryRegion
each have an asyncio twin with the same public methods and the same
signatures, a coroutine wherever the blocking one makes a call. A change to
one side that the other misses fails here."""

import inspect

import pytest

import gpucompute
import gpucompute.aio

TWINS = [
    (gpucompute.Client, gpucompute.aio.Client),
    (gpucompute.Tensor, gpucompute.aio.Tensor),
    (gpucompute.SharedMemoryRegion, gpucompute.aio.SharedMemoryRegion),
]

# Methods that make no call, the same function in both twins.
NO_CALL = {"ndarray"}


def public_methods(cls):
    return {
        name: getattr(cls, name)
        for name in dir(cls)
        if not name.startswith("_") and inspect.isfunction(getattr(cls, name))
    }


def parameters(function):
    return [
        (p.name, p.kind, p.default, p.annotation)
        for p in inspect.signature(function).parameters.values()
    ]


@pytest.mark.parametrize("blocking, asynchronous", TWINS, ids=lambda c: c.__name__)
def test_the_same_methods_with_the_same_signatures(blocking, asynchronous):
    ours, theirs = public_methods(blocking), public_methods(asynchronous)
    assert sorted(ours) == sorted(theirs)
    assert parameters(blocking.__init__) == parameters(asynchronous.__init__)
    for name in ours:
        assert parameters(ours[name]) == parameters(theirs[name]), name
        assert not inspect.iscoroutinefunction(ours[name]), name
        assert inspect.iscoroutinefunction(theirs[name]) == (name not in NO_CALL), name


@pytest.mark.parametrize("blocking, asynchronous", TWINS, ids=lambda c: c.__name__)
def test_with_and_async_with(blocking, asynchronous):
    assert hasattr(blocking, "__enter__") and hasattr(blocking, "__exit__")
    assert inspect.iscoroutinefunction(asynchronous.__aenter__)
    assert inspect.iscoroutinefunction(asynchronous.__aexit__)
