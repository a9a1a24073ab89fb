import gc, json, sys, tracemalloc, trio, os
sys.path.insert(0, os.environ.get("ROOT", "."))
from engine.kube import Client, Config, Informer, Resource
from engine.testing import ApiServer
CM = Resource(group="", version="v1", kind="ConfigMap", plural="configmaps", namespaced=True)
def configmap(i):
    return {"metadata": {"name": f"cm-{i:06d}", "labels": {"app": "bench", "shard": str(i % 16)},
            "annotations": {"bench.example.com/index": str(i)}},
            "data": {"key": f"value-{i}", "config.yaml": "a: 1\nb: [x, y, z]\n" * 4}}
async def main(n):
    api = ApiServer(listen=False)
    async with api:
        async with Client(Config.from_dict(api.kubeconfig), transport=api.memory_transport()) as client:
            for i in range(n):
                await client.create(CM, configmap(i), namespace="default")
            lst = await client.list(CM, namespace="default")
            size = sum(len(json.dumps(o, separators=(",", ":"))) for o in lst.items) / n
            del lst
            gc.collect()
            tracemalloc.start()
            before = tracemalloc.take_snapshot()
            base = tracemalloc.get_traced_memory()[0]
            informer = Informer(client, CM, namespace="default")
            async with trio.open_nursery() as nursery:
                await nursery.start(informer.run)
                await informer.wait_synced()
                gc.collect()
                grown = tracemalloc.get_traced_memory()[0] - base
                after = tracemalloc.take_snapshot()
                print(f"N={n} JSON bytes/object {size:.0f}  store growth bytes/object {grown/n:.0f}  ratio {grown/n/size:.2f}")
                for stat in after.compare_to(before, "lineno")[:8]:
                    print("  ", stat)
                nursery.cancel_scope.cancel()
trio.run(main, int(sys.argv[1]) if len(sys.argv) > 1 else 10000)
