"""Run the bundled ``bundles`` plugin against a cluster from a kubeconfig, from Python.

    python examples/kubeconfig_runner.py [--kubeconfig PATH] [--context NAME]

The same as ``python -m engine run --plugin bundles``, in a page: load the kubeconfig, open a
client, and let :func:`engine.kube.run_plugins` install the plugin's CRDs, set it up on a
manager and a cluster, and run the manager until SIGTERM/SIGINT (a second signal forces the
stop). Logs are JSON lines off a terminal; HTTP requests are logged only at debug level.
"""

from __future__ import annotations

import argparse

import trio

from engine import LogSink, Manager, configure_logging
from engine.kube import Client, Config, KubernetesEventSink, run_plugins


async def main(kubeconfig: str | None, context: str | None) -> None:
    config = Config.from_kubeconfig(kubeconfig, context=context)
    async with Client(config, user_agent="kubeconfig-runner-example") as client:
        manager = Manager()  # 15 s grace period: the whole shutdown fits a pod's 30 s termination grace
        manager.add_sink(LogSink())
        manager.add_sink(KubernetesEventSink(client, reporting_controller="kubeconfig-runner-example"))
        report = await run_plugins(client, ["bundles"], manager=manager)
        print(f"stopped ({report.reason}); runs cancelled at the end of the grace period: {report.cancelled_runs}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kubeconfig")
    parser.add_argument("--context")
    args = parser.parse_args()
    configure_logging()
    trio.run(main, args.kubeconfig, args.context)
