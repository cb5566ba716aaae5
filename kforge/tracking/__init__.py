"""MLflow tracking: the layout (`schema`), the writer (`tracker`, driven by the loop observer in
`observer`), resuming a job from what it wrote (`resume`), the store (`store`) and what the UI shows
first (`view`). Readers elsewhere (reference transfer, tables, ``kforge eval``) use `schema`'s names."""

from .schema import STATE_CODES, metric, metric_history
from .store import default_uri, open_client
from .tracker import Tracker, flatten

__all__ = ["STATE_CODES", "Tracker", "default_uri", "flatten", "metric", "metric_history", "open_client"]
