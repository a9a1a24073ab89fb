"""Run the bundled ``bundles`` plugin against a cluster from a kubeconfig, from Python.

    python examples/kubeconfig_runner.py [--kubeconfig PATH] [--context NAME]

The same as ``python -m engine run --plugin bundles``, in a page: load the kubeconfig, open a
client, install the plugin's CRDs, let the plugin register its controllers and watches, run
the manager until SIGTERM/SIGINT (a second signal forces the stop).
"""

from __future__ import annotations

import argparse

import trio

from engine import LogSink, Manager, configure_logging
from engine.kube import Client, Cluster, Config, KubernetesEventSink, PluginContext, install_crds, load_plugin


async def main(kubeconfig: str | None, context: str | None) -> None:
    config = Config.from_kubeconfig(kubeconfig, context=context)
    async with Client(config, user_agent="kubeconfig-runner-example") as client:
        plugin = load_plugin("bundles")
        await install_crds(client, plugin.crds)

        manager = Manager(grace_period=30)
        manager.add_sink(LogSink())
        manager.add_sink(KubernetesEventSink(client, reporting_controller="kubeconfig-runner-example"))
        cluster = Cluster(client, manager)
        await plugin.setup(PluginContext(
            name=plugin.name, manager=manager, cluster=cluster, client=client, config=dict(plugin.config),
        ))
        report = await manager.run()
        print(f"stopped ({report.reason}); runs cancelled at the end of the grace period: {report.cancelled_runs}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kubeconfig")
    parser.add_argument("--context")
    args = parser.parse_args()
    configure_logging()
    trio.run(main, args.kubeconfig, args.context)
