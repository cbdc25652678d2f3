"""Peers that cannot run on this machine, reported as such (never faked): the reason is recorded in
the results and shown in the report."""
from .base import NotRunnable, System


class Unavailable(System):
    reason = "?"

    def check_runnable(self):
        raise NotRunnable(self.reason)


class MongoDB(Unavailable):
    name = "mongodb"
    label = "MongoDB"
    reason = ("cannot run here: no MongoDB server reaches this machine (Debian has no mongodb-server package; "
              "PyPI/npm wrappers such as mongodb-memory-server download the server binary from MongoDB's own "
              "site, which this machine cannot reach)")


class GreptimeDB(Unavailable):
    name = "greptimedb"
    label = "GreptimeDB"
    reason = ("cannot run here: GreptimeDB ships as release binaries and container images only; none of the "
              "registries this machine reaches (PyPI, Debian, crates.io, Maven Central, Go proxy, npm) has a server")
