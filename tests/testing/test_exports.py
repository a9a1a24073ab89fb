from __future__ import annotations

import engine.testing


def test_every_public_name_is_exported_once_and_presents_itself_as_engine_testing() -> None:
    assert len(engine.testing.__all__) == len(set(engine.testing.__all__))
    for name in engine.testing.__all__:
        value = getattr(engine.testing, name)
        if isinstance(value, type) or callable(value):
            assert value.__module__ == "engine.testing", name
    public = {n for n in dir(engine.testing) if n.isidentifier() and not n.startswith("_")}
    assert public == set(engine.testing.__all__)


def test_errors_hang_under_engine_error() -> None:
    from engine._errors import EngineError

    assert issubclass(engine.apiserver.ApiServerError, EngineError)
    assert issubclass(engine.apiserver.RequestRejected, engine.apiserver.ApiServerError)
