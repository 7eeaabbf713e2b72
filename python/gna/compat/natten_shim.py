"""A `natten` module backed by gna, for code that imports NATTEN's legacy API.

    import gna.compat.natten_shim; gna.compat.natten_shim.install()

After install(), in this process:

* `import natten` and `from natten.functional import natten2dqkrpb, natten2dav, ...` give
  gna's implementations (gna.compat.natten: every legacy name, each a thin function that calls
  the installed backend);
* `importlib.util.find_spec("natten")` finds it and `importlib.metadata.version("natten")`
  returns NATTEN_VERSION, which is what Hugging Face transformers checks
  (`transformers.utils.is_natten_available`);
* transformers' DiNAT (and NAT, where the installed transformers has it) runs on gna: if
  transformers was imported first, its cached NATTEN check is cleared and the placeholder
  functions its model modules bound in NATTEN's absence are replaced; a model module imported
  later picks the shim up by itself.

The rule: call install() before constructing a DiNAT model (DinatModel, DinatForImageClassification
and DinatBackbone check for NATTEN in their constructors); whether transformers is imported
before or after does not matter.

Some transformers releases (5.x among them) build DiNAT's query / key / value as
[B, W, H, heads, D] instead of NATTEN's [B, heads, H, W, D] (a transpose(1, 2) meant for
sequence models), which no NATTEN version accepts. install() detects that by running the
attention layer once on a small non-square input with a probe in place of NATTEN, and only then
replaces the layer's forward with one that keeps NATTEN's layout and otherwise computes what the
published model computes (query scaled by 1/sqrt(D), QK + rpb, softmax, dropout, AV, heads merged
back). `status()` says whether it did.

install(backend=...) routes the `natten.functional` names to another implementation (an object
or module with the same names), e.g. a reference for tests; install() again with no argument
goes back to gna. uninstall() removes the module and the import hooks and restores the patched
forward methods.
"""
import importlib
import importlib.abc
import importlib.machinery
import importlib.metadata
import math
import sys
import types
import warnings

from . import natten as _compat

__all__ = ["install", "uninstall", "status", "NATTEN_VERSION"]

# The NATTEN release whose legacy API gna.compat.natten offers, with a local label that says
# what it is (PEP 440: sorts as 0.17.5 for version checks).
NATTEN_VERSION = "0.17.5+gna"

# transformers' modules that import NATTEN's functional API.
_MODEL_MODULES = (
    "transformers.models.dinat.modeling_dinat",
    "transformers.models.nat.modeling_nat",
    "transformers.models.deprecated.nat.modeling_nat",
)
_IMPORT_UTILS = "transformers.utils.import_utils"


class _State:
    installed = False
    backend = _compat
    finder = None
    patched = {}     # class -> its original forward
    probed = {}      # module name -> "heads-first" | "fixed" | "not probed: <why>"
    modules = {}


_state = _State()


def _normalized(name):
    return name.lower().replace("_", "-") if name else name


# ---------------------------------------------------------------------------------------------
# The modules


def _dispatcher(name):
    def call(*args, **kwargs):
        fn = getattr(_state.backend, name, None)
        if fn is None:
            raise NotImplementedError(f"natten.functional.{name}: the installed backend "
                                      f"{_state.backend!r} has no {name}")
        return fn(*args, **kwargs)

    call.__name__ = call.__qualname__ = name
    call.__module__ = "natten.functional"
    call.__doc__ = getattr(_compat, name).__doc__
    return call


class _ShimLoader(importlib.abc.Loader):
    def create_module(self, spec):
        return _state.modules[spec.name]

    def exec_module(self, module):
        pass


_LOADER = _ShimLoader()


def _build_modules():
    import torch

    pkg = types.ModuleType("natten", "NATTEN's legacy API provided by gna (gna.compat.natten).")
    pkg.__spec__ = importlib.machinery.ModuleSpec("natten", _LOADER, is_package=True)
    pkg.__loader__ = _LOADER
    pkg.__path__ = []
    pkg.__package__ = "natten"
    pkg.__version__ = NATTEN_VERSION
    pkg.__gna_shim__ = True
    pkg.has_cuda = lambda: torch.cuda.is_available()
    pkg.has_half = lambda *args, **kwargs: True
    pkg.has_bfloat = lambda *args, **kwargs: True

    fn = types.ModuleType("natten.functional",
                          "NATTEN's legacy functional API provided by gna (gna.compat.natten).")
    fn.__spec__ = importlib.machinery.ModuleSpec("natten.functional", _LOADER)
    fn.__loader__ = _LOADER
    fn.__package__ = "natten"
    fn.__gna_shim__ = True
    for name in _compat.__all__:
        setattr(fn, name, _dispatcher(name))
    fn.__all__ = list(_compat.__all__)
    pkg.functional = fn
    return {"natten": pkg, "natten.functional": fn}


class _ShimDistribution(importlib.metadata.Distribution):
    """Package metadata for `importlib.metadata.version("natten")` and friends."""

    def read_text(self, filename):
        if filename in ("METADATA", "PKG-INFO"):
            return (f"Metadata-Version: 2.1\nName: natten\nVersion: {NATTEN_VERSION}\n"
                    f"Summary: NATTEN's legacy API provided by gna\n")
        if filename == "top_level.txt":
            return "natten\n"
        return None

    def locate_file(self, path):
        import pathlib
        return pathlib.Path(__file__).parent / path


class _PatchingLoader(importlib.abc.Loader):
    """Runs a module's own loader, then adapts the module to the shim."""

    def __init__(self, loader):
        self._loader = loader

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        self._loader.exec_module(module)
        _adapt_model_module(module)

    def __getattr__(self, name):  # get_source, get_code, ... of the wrapped loader
        return getattr(self._loader, name)


class _ShimFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path=None, target=None):
        if fullname in _state.modules:
            return _state.modules[fullname].__spec__
        if fullname in _MODEL_MODULES:
            for finder in sys.meta_path:
                if finder is self or not hasattr(finder, "find_spec"):
                    continue
                spec = finder.find_spec(fullname, path, target)
                if spec is not None:
                    if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                        spec.loader = _PatchingLoader(spec.loader)
                    return spec
        return None

    def find_distributions(self, context=None):
        name = getattr(context, "name", None)
        if name is None or _normalized(name) == "natten":
            return iter([_ShimDistribution()])
        return iter([])

    def invalidate_caches(self):
        pass


# ---------------------------------------------------------------------------------------------
# transformers


def _refresh_transformers_check():
    """Clears transformers' cached NATTEN check (recent releases), or sets the flag older
    releases computed at import."""
    utils = sys.modules.get(_IMPORT_UTILS)
    if utils is None:
        return
    check = getattr(utils, "is_natten_available", None)
    if check is not None and hasattr(check, "cache_clear"):
        check.cache_clear()
    if isinstance(getattr(utils, "_natten_available", None), bool):
        utils._natten_available = True


class _Probe(Exception):
    pass


def _layer_layout(module):
    """Runs the model's NeighborhoodAttention once on a [1, 3, 5, 4] input (2 heads of 2
    channels) with a probe in place of natten2dqkrpb; returns the query shape it was given, or
    a string saying why it could not."""
    import torch

    cls = getattr(module, "NeighborhoodAttention", None)
    if cls is None or not hasattr(module, "natten2dqkrpb"):
        return "no NeighborhoodAttention using natten2dqkrpb"
    config = types.SimpleNamespace(qkv_bias=True, attention_probs_dropout_prob=0.0)
    seen = {}

    def probe(query, key, rpb, kernel_size, dilation=1, *args, **kwargs):
        seen["shape"] = tuple(query.shape)
        raise _Probe()

    saved = module.natten2dqkrpb
    module.natten2dqkrpb = probe
    try:
        try:
            layer = cls(config, 4, 2, 3, 1)
        except TypeError:  # NAT's layer has no dilation
            layer = cls(config, 4, 2, 3)
        forward = _state.patched.get(cls, cls.forward)
        with torch.no_grad():
            forward(layer, torch.zeros(1, 3, 5, 4))
    except _Probe:
        pass
    except Exception as e:  # a layer this probe does not know how to build or call
        return f"probe failed: {type(e).__name__}: {e}"
    finally:
        module.natten2dqkrpb = saved
    return seen.get("shape", "probe not reached")


def _neighborhood_attention_forward(module):
    """DiNAT / NAT attention with NATTEN's heads-first layout, calling the NATTEN functions
    bound in the model's module."""
    import torch

    def forward(self, hidden_states, output_attentions=False):
        batch, *spatial, _ = hidden_states.shape
        heads, dim = self.num_attention_heads, self.attention_head_size

        def heads_first(x):
            return x.view(batch, *spatial, heads, dim).movedim(-2, 1)

        query = heads_first(self.query(hidden_states)) / math.sqrt(dim)
        key = heads_first(self.key(hidden_states))
        value = heads_first(self.value(hidden_states))
        dilation = getattr(self, "dilation", None) or 1
        scores = module.natten2dqkrpb(query, key, self.rpb, self.kernel_size, dilation)
        probs = self.dropout(torch.softmax(scores, dim=-1))
        context = module.natten2dav(probs, value, self.kernel_size, dilation)
        context = context.movedim(1, -2).reshape(batch, *spatial, heads * dim)
        return (context, probs) if output_attentions else (context,)

    forward.__gna_shim__ = True
    return forward


def _adapt_model_module(module):
    """Binds the shim's functions where the module holds NATTEN's names (placeholders when
    NATTEN was missing at its import) and fixes the attention layout where it is not NATTEN's."""
    if not _state.installed:
        return
    fn = _state.modules["natten.functional"]
    for name in _compat.__all__:
        if hasattr(module, name):
            setattr(module, name, getattr(fn, name))
    layout = _layer_layout(module)
    cls = getattr(module, "NeighborhoodAttention", None)
    if layout == (1, 2, 3, 5, 2):
        _state.probed[module.__name__] = "heads-first"
    elif isinstance(layout, tuple):
        if cls not in _state.patched:
            _state.patched[cls] = cls.forward
            cls.forward = _neighborhood_attention_forward(module)
        _state.probed[module.__name__] = (f"fixed: the layer passed query {list(layout)} for "
                                          f"NATTEN's [1, 2, 3, 5, 2]")
    else:
        _state.probed[module.__name__] = f"not probed: {layout}"
        warnings.warn(f"gna.compat.natten_shim: could not check the attention layout of "
                      f"{module.__name__} ({layout})")


# ---------------------------------------------------------------------------------------------
# The API


def install(backend=None):
    """Provides the `natten` module (backed by gna.compat.natten, or by `backend`: any object
    with NATTEN's functional names) and adapts transformers' NATTEN users. Idempotent; returns
    the `natten` module."""
    _state.backend = _compat if backend is None else backend
    if not _state.installed:
        foreign = sys.modules.get("natten")
        if foreign is not None and not getattr(foreign, "__gna_shim__", False):
            warnings.warn("gna.compat.natten_shim: replacing the NATTEN module already imported "
                          f"({getattr(foreign, '__file__', foreign)}) in sys.modules")
        _state.modules = _build_modules()
        _state.finder = _ShimFinder()
        sys.meta_path.insert(0, _state.finder)
        sys.modules.update(_state.modules)
        for name in [n for n in sys.modules if n.startswith("natten.")]:
            if name not in _state.modules:
                del sys.modules[name]
        _state.installed = True
    _refresh_transformers_check()
    for name in _MODEL_MODULES:
        module = sys.modules.get(name)
        if module is not None:
            _adapt_model_module(module)
    return _state.modules["natten"]


def uninstall():
    """Removes the `natten` module and the import hooks, restores the attention forwards this
    module replaced. Functions already bound in other modules keep calling the last backend."""
    if not _state.installed:
        return
    if _state.finder in sys.meta_path:
        sys.meta_path.remove(_state.finder)
    for name, module in _state.modules.items():
        if sys.modules.get(name) is module:
            del sys.modules[name]
    for cls, forward in _state.patched.items():
        cls.forward = forward
    _state.patched = {}
    _state.probed = {}
    _state.installed = False
    _state.backend = _compat
    _refresh_transformers_check()


def status():
    """What install() did: whether it is installed, the backend, the version it reports, and
    per transformers model module whether the attention layout was NATTEN's or was fixed."""
    return {"installed": _state.installed,
            "backend": getattr(_state.backend, "__name__", repr(_state.backend)),
            "version": NATTEN_VERSION,
            "model_modules": dict(_state.probed)}
