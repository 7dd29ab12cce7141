"""A PEP 517 build backend for the pure-Python package kvfs: a wheel is a zip
of kvfs/*.py with its metadata, which needs no build requirements, so
`pip install ./python` works offline."""
import base64
import hashlib
import io
import os
import re
import tarfile
import zipfile

NAME = "kvfs"
SUMMARY = "Read kvfs KV-cache chunk files as zero-copy numpy views and ask a kvfs mount for blends"
REQUIRES_PYTHON = ">=3.8"
REQUIRES = ["numpy"]
EXTRAS = {"xxhash": ["xxhash>=2"]}  # XXH3-64 without the system's libxxhash
HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _version():
    text = open(os.path.join(HERE, NAME, "__init__.py"), encoding="utf-8").read()
    return re.search(r'^__version__ = "([^"]+)"', text, re.M).group(1)


def _metadata():
    lines = ["Metadata-Version: 2.1", "Name: " + NAME, "Version: " + _version(), "Summary: " + SUMMARY,
             "Requires-Python: " + REQUIRES_PYTHON]
    lines += ["Requires-Dist: " + r for r in REQUIRES]
    for extra, reqs in EXTRAS.items():
        lines.append("Provides-Extra: " + extra)
        lines += ['Requires-Dist: %s; extra == "%s"' % (r, extra) for r in reqs]
    lines.append("Description-Content-Type: text/markdown")
    readme = open(os.path.join(HERE, "README.md"), encoding="utf-8").read()
    return ("\n".join(lines) + "\n\n" + readme).encode("utf-8")


def _sources():
    pkg = os.path.join(HERE, NAME)
    return sorted(NAME + "/" + f for f in os.listdir(pkg) if f.endswith(".py"))


def _digest(data):
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    dist = "%s-%s" % (NAME, _version())
    info = dist + ".dist-info/"
    files = [(src, open(os.path.join(HERE, src), "rb").read()) for src in _sources()]
    files.append((info + "METADATA", _metadata()))
    files.append((info + "WHEEL", b"Wheel-Version: 1.0\nGenerator: kvfs_build\nRoot-Is-Purelib: true\n"
                                  b"Tag: py3-none-any\n"))
    record = "".join("%s,%s,%d\n" % (name, _digest(data), len(data)) for name, data in files)
    files.append((info + "RECORD", (record + info + "RECORD,,\n").encode()))
    wheel = dist + "-py3-none-any.whl"
    with zipfile.ZipFile(os.path.join(wheel_directory, wheel), "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in files:
            z.writestr(name, data)
    return wheel


def build_sdist(sdist_directory, config_settings=None):
    dist = "%s-%s" % (NAME, _version())
    with tarfile.open(os.path.join(sdist_directory, dist + ".tar.gz"), "w:gz") as t:
        for src in _sources() + ["pyproject.toml", "README.md", "_build/kvfs_build.py"]:
            t.add(os.path.join(HERE, src), dist + "/" + src)
        pkg_info = _metadata()
        ti = tarfile.TarInfo(dist + "/PKG-INFO")
        ti.size = len(pkg_info)
        t.addfile(ti, io.BytesIO(pkg_info))
    return dist + ".tar.gz"
