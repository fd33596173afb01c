"""Building the SparkSession: local by default, or whatever ``spark-submit`` set up.

Local runs need three things that are easy to get wrong: the Python workers must run this
interpreter (``PYSPARK_PYTHON``; they import ``kcoord.pipeline``, ``kcoord.protocol``,
``kcoord.coordinator``, ``kcoord.share`` and ``kcoord.storage``), Spark should bind to loopback (``SPARK_LOCAL_IP``), and the default 200 shuffle
partitions are far too many for a few cores. On a cluster the code travels to the executors as
a zip added with ``addPyFile``; their Python still needs the ``kcoord[pipeline]`` dependencies.
"""

from __future__ import annotations

import atexit
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import Any

PACKAGES = ("pipeline", "protocol", "coordinator", "share", "storage")
# Not resolved: in a checkout this is src/kcoord (which links the top-level folders in).
PACKAGE_DIR = Path(__file__).absolute().parents[1]
ROOT = PACKAGE_DIR.parent  # the folder holding the kcoord package: the workers import from it


def java_version() -> str | None:
    """The first line of ``java -version``, or None if no Java runtime can be started."""
    java_home = os.environ.get("JAVA_HOME")
    java = shutil.which("java", path=os.path.join(java_home, "bin")) if java_home else None
    java = java or shutil.which("java")
    if java is None:
        return None
    try:
        done = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if done.returncode != 0:
        return None
    lines = (done.stderr or done.stdout).strip().splitlines()
    return lines[0] if lines else "java"


def is_local(master: str | None) -> bool:
    return master is None or master.startswith("local")


def code_zip(directory: str) -> str:
    """A zip of the packages the executors import (sources only), under ``kcoord/``."""
    path = os.path.join(directory, "kcoord-pipeline.zip")
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        # the package's __init__ imports kcoord.compiled (which finds no build in the zip)
        for f in (PACKAGE_DIR / "__init__.py", PACKAGE_DIR / "compiled" / "__init__.py"):
            z.write(f, "kcoord/" + f.relative_to(PACKAGE_DIR).as_posix())
        for package in PACKAGES:
            for f in sorted((PACKAGE_DIR / package).rglob("*.py")):
                z.write(f, "kcoord/" + f.relative_to(PACKAGE_DIR).as_posix())
    return path


def build_session(
    master: str | None = None,
    *,
    shuffle_partitions: int | None = None,
    conf: dict[str, str] | None = None,
    app_name: str = "kcoord-pipeline",
) -> Any:
    """A SparkSession for the job.

    ``master`` None: under ``spark-submit`` use its master, otherwise ``local[*]``.
    """
    submitted = "PYSPARK_GATEWAY_PORT" in os.environ  # the JVM that spark-submit started
    if master is None and not submitted:
        master = "local[*]"
    local = master is not None and master.startswith("local")
    # What the local JVM and its Python workers are started with; this process's environment
    # is given back afterwards (a subprocess started later must not inherit it).
    saved = dict(os.environ)
    if local:
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        paths = os.environ.get("PYTHONPATH", "").split(os.pathsep)
        if str(ROOT) not in paths:  # workers import our packages even without an install
            os.environ["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, paths)])
    try:
        return _session(master, local, shuffle_partitions, conf, app_name)
    finally:
        for key in ("SPARK_LOCAL_IP", "PYSPARK_PYTHON", "PYTHONPATH"):
            if key in saved:
                os.environ[key] = saved[key]
            else:
                os.environ.pop(key, None)


def _session(
    master: str | None,
    local: bool,
    shuffle_partitions: int | None,
    conf: dict[str, str] | None,
    app_name: str,
) -> Any:
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName(app_name)
    if master is not None:
        builder = builder.master(master)
    if shuffle_partitions is None and local:
        shuffle_partitions = max(2 * (os.cpu_count() or 2), 4)
    settings = {
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.session.timeZone": "UTC",
    }
    if shuffle_partitions is not None:
        settings["spark.sql.shuffle.partitions"] = str(shuffle_partitions)
    settings.update(conf or {})
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    if not local:
        tmp = tempfile.mkdtemp(prefix="kcoord-pipeline-")
        atexit.register(shutil.rmtree, tmp, True)
        spark.sparkContext.addPyFile(code_zip(tmp))
    return spark
