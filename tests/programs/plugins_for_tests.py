"""Plugins used by the plugin-discovery tests."""

from __future__ import annotations

from engine.kube import Plugin, PluginContext


async def _setup(ctx: PluginContext) -> None:
    async def reconcile(ctx):  # type: ignore[no-untyped-def]
        return None

    from engine import Controller

    ctx.manager.add_controller(Controller("noop", reconcile))


good = Plugin(name="good", setup=_setup)
not_a_plugin = 42


def factory() -> Plugin:
    return Plugin(name="made", setup=_setup)


async def _broken_setup(ctx: PluginContext) -> None:
    raise RuntimeError("cannot reach the widget service")


broken_setup = Plugin(name="broken", setup=_broken_setup)

one_example = Plugin(
    name="one-example",
    setup=_setup,
    examples=({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "greeting", "namespace": "default"},
               "data": {"greeting": "hello"}},),
)


async def setup(ctx: PluginContext) -> None:
    """A plugin's setup function, which ``--plugin module:setup`` names by mistake."""
    await _setup(ctx)


def factory_with_arguments(name: str) -> Plugin:
    return Plugin(name=name, setup=_setup)


def factory_of_a_number() -> int:
    return 42
