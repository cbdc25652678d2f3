"""Jars from Maven Central (the Iceberg Spark runtime, PgJDBC), cached and checked against the
SHA-1 Maven publishes beside each artifact."""
import hashlib
import urllib.request
from pathlib import Path


def maven_jar(cache: Path, group: str, artifact: str, version: str) -> Path:
    """`artifact-version.jar` of `group` in `cache`, downloaded once."""
    cache.mkdir(parents=True, exist_ok=True)
    jar = cache / f"{artifact}-{version}.jar"
    if not jar.exists():
        url = (f"https://repo1.maven.org/maven2/{group.replace('.', '/')}/{artifact}/{version}/"
               f"{artifact}-{version}.jar")
        data = urllib.request.urlopen(url, timeout=300).read()
        expected = urllib.request.urlopen(url + ".sha1", timeout=60).read().decode().split()[0]
        if hashlib.sha1(data).hexdigest() != expected:
            raise RuntimeError(f"{url} does not match its SHA-1")
        partial = jar.with_suffix(".part")
        partial.write_bytes(data)
        partial.rename(jar)
    return jar
