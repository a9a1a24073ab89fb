"""``mirror``: copies ConfigMaps labelled for mirroring into the namespaces a label selects.

Label a ConfigMap ``mirror.engine.dev/enabled: "true"`` and annotate it with
``mirror.engine.dev/namespace-selector: "team=a"`` (equality-based, comma-separated). The
plugin keeps a copy (labelled ``mirror.engine.dev/source: <namespace>.<name>``) in every
selected namespace but the source's own, removes copies from namespaces that stop matching,
recreates deleted copies, and, through the finalizer ``mirror.engine.dev/cleanup``, deletes
every copy before the source ConfigMap itself goes away.
"""

from __future__ import annotations

from ._controller import plugin

__all__ = ["plugin"]
