"""The project package is chat_platform so that ``import platform`` stays the standard library."""

import importlib.util
import platform
import sysconfig
from pathlib import Path


def test_import_platform_is_the_standard_library():
    stdlib = Path(sysconfig.get_paths()["stdlib"]).resolve()
    assert Path(platform.__file__).resolve() == stdlib / "platform.py"
    assert callable(platform.python_version)
    assert platform.python_version().startswith("3.11")


def test_no_top_level_module_shadows_platform():
    root = Path(__file__).resolve().parents[1]
    assert not (root / "platform").exists()
    assert not (root / "platform.py").exists()
    spec = importlib.util.find_spec("platform")
    assert spec is not None and spec.origin is not None
    assert "site-packages" not in spec.origin
