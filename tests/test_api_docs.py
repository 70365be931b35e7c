"""Every public name is documented, and the generated API reference covers it."""
from __future__ import annotations

import enum
import inspect
import os

import warpsched
from warpsched import PipelineConfig

API_PAGE = os.path.join(os.path.dirname(__file__), "..", "docs", "api", "warpsched.html")
# what a class inherits when it has no docstring of its own
INHERITED = {inspect.getdoc(enum.Enum), inspect.getdoc(enum.Flag), inspect.getdoc(object)}


def _own_doc(obj):
    doc = inspect.getdoc(obj) or ""
    if doc in INHERITED:
        return ""
    if inspect.isclass(obj) and doc.startswith(obj.__name__ + "("):  # a dataclass's generated signature
        return ""
    return doc


def test_every_public_name_has_its_own_docstring():
    missing = [n for n in warpsched.__all__ if len(_own_doc(getattr(warpsched, n))) < 20]
    assert not missing, f"public names without a docstring of their own: {missing}"


def test_every_pipeline_factory_documents_its_arguments():
    for name in [n for n in vars(PipelineConfig) if n.startswith("create_")]:
        doc = inspect.getdoc(getattr(PipelineConfig, name))
        assert doc and len(doc.splitlines()[0]) > 20, name
        for arg in ("num_stages", "interleave_stride", "cta_layout_vmnk", "mcast_mode_mn", "advance_on_wait",
                    "advance_on_acquire", "consumer_signaling_threads", "num_bytes_per_warp_per_cta"):
            assert f"``{arg}``" in doc, (name, arg)


def test_api_reference_is_generated_for_every_public_name():
    """docs/api/warpsched.html comes from `bash docs/build_api.sh` (pdoc); regenerate it when the
    public API changes."""
    with open(API_PAGE, encoding="utf-8") as f:
        page = f.read()
    stale = [n for n in warpsched.__all__ if f'id="{n}"' not in page]
    assert not stale, f"docs/api/warpsched.html lacks {stale}: run `bash docs/build_api.sh`"
