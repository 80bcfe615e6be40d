"""Hardware, model and quantisation facts, shipped as TOML with a source per fact.

>>> from tierwise.catalog import load_catalog
>>> cat = load_catalog()
>>> cat.hardware["h100-sxm"].memory_bandwidth
3350000000000.0
"""

from tierwise.catalog._loader import Catalog, Hardware, ModelSpec, QuantFormat, load_catalog

__all__ = ["Catalog", "Hardware", "ModelSpec", "QuantFormat", "load_catalog"]
