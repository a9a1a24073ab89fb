"""The Kubernetes adapter: configuration, an httpx client, informers and their stores.

Nothing in the core engine imports this package.
"""

# --- configuration (engine.kube._config) ---
from ._auth import BearerTokenAuth as BearerTokenAuth
from ._auth import ExecAuth as ExecAuth
from ._auth import ExecConfig as ExecConfig
from ._auth import ExecCredential as ExecCredential
from ._auth import TokenFileAuth as TokenFileAuth
from ._config import Config as Config
from ._errors import ConfigError as ConfigError
from ._errors import KubeError as KubeError

# --- client, resources and API errors (engine.kube._client, engine.kube._errors) ---

# --- informers and stores (engine.kube._informer, engine.kube._store) ---

# --- leases and events helpers (engine.kube._lease, engine.kube._events) ---
