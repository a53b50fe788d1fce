"""The client and its resources (sandboxes, snapshots, volumes, operations,
events, tenants, tokens, pools, workers)."""

from __future__ import annotations

import uuid
from typing import Any, Dict, Iterator, List, Literal, Mapping, Optional, Sequence, Union, overload

from . import __version__
from ._config import ConfigError, resolve
from ._http import QueryValue, Transport
from .operation import Operation, _q
from .sandbox import Sandbox


class Client:
    """A connection to a Sandbox controller.

    ``url``, ``token`` and ``ca_file`` are found as the CLI finds them
    (arguments, then ``SANDBOX_URL`` / ``SANDBOX_TOKEN`` /
    ``SANDBOX_CA_FILE``, then the CLI's config file and its ``context``).
    ``timeout``: seconds one HTTP request may take (long-polls add their
    wait to it). ``retries``: how many times a safe request is sent again
    after a connection failure, 502/503/504 or 429 ``rate_limited``
    (0 disables).
    """

    def __init__(
        self,
        url: Optional[str] = None,
        token: Optional[str] = None,
        *,
        ca_file: Optional[str] = None,
        timeout: float = 30.0,
        retries: int = 3,
        context: Optional[str] = None,
    ) -> None:
        cfg = resolve(url, token, ca_file, context)
        if not cfg.token:
            raise ConfigError(
                "no API token: pass token=, set SANDBOX_TOKEN, or put 'token = sbt_…' in "
                f"{cfg.path or '~/.config/sandbox/config'} (an admin makes one: sandbox tokens create)"
            )
        self.url = cfg.url
        self.ca_file = cfg.ca_file
        self.context = cfg.context
        self.timeout = float(timeout)
        self.retries = int(retries)
        self._transport = Transport(
            cfg.url,
            cfg.token,
            ca_file=cfg.ca_file,
            timeout=self.timeout,
            retries=self.retries,
            user_agent=f"sandbox-client-python/{__version__}",
        )
        self.sandboxes = Sandboxes(self)
        self.snapshots = Snapshots(self)
        self.volumes = Volumes(self)
        self.operations = Operations(self)
        self.tenants = Tenants(self)
        self.tokens = Tokens(self)
        self.pools = Pools(self)
        self.workers = Workers(self)

    def __repr__(self) -> str:
        return f"<sandbox_client.Client {self.url}>"

    def request(
        self,
        method: str,
        path: str,
        *,
        query: Optional[Mapping[str, QueryValue]] = None,
        json: Any = None,
        idempotency_key: Optional[str] = None,
    ) -> Any:
        """Any API call not wrapped here: the parsed JSON answer (errors and
        retries as for every call)."""
        return self._transport.call(method, path, query=query, json=json, idempotency_key=idempotency_key)

    def events(
        self,
        after: Optional[int] = None,
        sandbox: Optional[str] = None,
        operation: Optional[str] = None,
        kind: Optional[str] = None,
        follow: bool = False,
        wait: int = 30,
    ) -> "EventStream":
        """Events (dicts: id, ts, tenant, kind, sandbox_id, operation_id,
        data) after the cursor ``after`` (default: the oldest kept), oldest
        first. Without ``follow`` it ends at the newest; with it, it
        long-polls for more until the caller stops. ``next_after`` on the
        stream is the cursor to resume from."""
        return EventStream(self, after, sandbox, operation, kind, follow, wait)

    def images(self, tenant: Optional[str] = None) -> Dict[str, Any]:
        """``{"images":[…],"default_image"…}``: the images ready workers have
        (for a member: those its tenant may use)."""
        return self._transport.call("GET", "/v1/images", query={"tenant": tenant})

    def version(self) -> Dict[str, Any]:
        """``{"version","api","schema","workers"}`` of the controller."""
        return self._transport.call("GET", "/v1/version")


def _spec(**fields: Any) -> Dict[str, Any]:
    return {k: v for k, v in fields.items() if v is not None}


class Sandboxes:
    """``client.sandboxes``"""

    def __init__(self, client: Client) -> None:
        self._client = client

    @overload
    def create(
        self,
        image: Optional[str] = None,
        *,
        name: Optional[str] = None,
        tenant: Optional[str] = None,
        cpu_millis: Optional[int] = None,
        memory_mib: Optional[int] = None,
        disk_mib: Optional[int] = None,
        ttl_seconds: Optional[int] = None,
        network: Optional[str] = None,
        trust: Optional[Mapping[str, bool]] = None,
        env: Optional[Mapping[str, str]] = None,
        labels: Optional[Mapping[str, str]] = None,
        isolation: Optional[str] = None,
        selector: Optional[Mapping[str, str]] = None,
        read_only_root: Optional[bool] = None,
        hardened: Optional[bool] = None,
        from_: Optional[str] = None,
        volumes: Optional[Sequence[Mapping[str, Any]]] = None,
        wait: Literal[True] = True,
        timeout: Optional[float] = 300,
    ) -> Sandbox: ...

    @overload
    def create(
        self,
        image: Optional[str] = None,
        *,
        name: Optional[str] = None,
        tenant: Optional[str] = None,
        cpu_millis: Optional[int] = None,
        memory_mib: Optional[int] = None,
        disk_mib: Optional[int] = None,
        ttl_seconds: Optional[int] = None,
        network: Optional[str] = None,
        trust: Optional[Mapping[str, bool]] = None,
        env: Optional[Mapping[str, str]] = None,
        labels: Optional[Mapping[str, str]] = None,
        isolation: Optional[str] = None,
        selector: Optional[Mapping[str, str]] = None,
        read_only_root: Optional[bool] = None,
        hardened: Optional[bool] = None,
        from_: Optional[str] = None,
        volumes: Optional[Sequence[Mapping[str, Any]]] = None,
        wait: Literal[False],
        timeout: Optional[float] = 300,
    ) -> Operation: ...

    def create(
        self,
        image: Optional[str] = None,
        *,
        name: Optional[str] = None,
        tenant: Optional[str] = None,
        cpu_millis: Optional[int] = None,
        memory_mib: Optional[int] = None,
        disk_mib: Optional[int] = None,
        ttl_seconds: Optional[int] = None,
        network: Optional[str] = None,
        trust: Optional[Mapping[str, bool]] = None,
        env: Optional[Mapping[str, str]] = None,
        labels: Optional[Mapping[str, str]] = None,
        isolation: Optional[str] = None,
        selector: Optional[Mapping[str, str]] = None,
        read_only_root: Optional[bool] = None,
        hardened: Optional[bool] = None,
        from_: Optional[str] = None,
        volumes: Optional[Sequence[Mapping[str, Any]]] = None,
        wait: bool = True,
        timeout: Optional[float] = 300,
    ) -> Union[Sandbox, Operation]:
        """Creates a sandbox and returns it once it runs (``wait=False``: its
        create :class:`Operation` at once). Fields left None take the
        server's defaults (docs/api.md). ``from_``: a snapshot (id or name)
        to start from, sent as the spec's ``"from"`` (``image`` may then be
        left out: the snapshot's is used). ``volumes``: at most 8 mounts
        ``{"volume": NAME_OR_ID, "path": "/abs", "read_only": bool}``
        (docs/volumes.md). A create that fails raises the
        class of its error (``IsolationUnavailable``, ``ImageUnavailable``,
        ``SandboxExited``, …) with ``.operation`` set; ``timeout`` (seconds)
        running out raises :class:`TimeoutError`. The request carries an
        Idempotency-Key, so a retry after a lost answer makes no second
        sandbox."""
        spec = _spec(
            image=image,
            name=name,
            tenant=tenant,
            cpu_millis=cpu_millis,
            memory_mib=memory_mib,
            disk_mib=disk_mib,
            ttl_seconds=ttl_seconds,
            network=network,
            trust=dict(trust) if trust is not None else None,
            env=dict(env) if env is not None else None,
            labels=dict(labels) if labels is not None else None,
            isolation=isolation,
            selector=dict(selector) if selector is not None else None,
            read_only_root=read_only_root,
            hardened=hardened,
            volumes=[dict(v) for v in volumes] if volumes is not None else None,
        )
        if from_ is not None:
            spec["from"] = from_
        body = self._client._transport.call("POST", "/v1/sandboxes", json=spec, idempotency_key=str(uuid.uuid4()))
        op = Operation(self._client, body["operation"])
        if not wait:
            return op
        op.wait(timeout)
        return self.get(body["sandbox"]["id"])

    def get(self, id_or_name: str) -> Sandbox:
        body = self._client._transport.call("GET", f"/v1/sandboxes/{_q(id_or_name)}")
        return Sandbox(self._client, body["sandbox"], body.get("operations"))

    def list(
        self,
        labels: Optional[Mapping[str, str]] = None,
        phase: Union[str, Sequence[str], None] = None,
        all: bool = False,
        tenant: Optional[str] = None,
    ) -> Iterator[Sandbox]:
        """Every matching sandbox, newest first, page after page (deleted ones
        only with ``all`` or a ``phase`` naming ``deleted``)."""
        query: Dict[str, QueryValue] = {"tenant": tenant, "limit": 1000}
        if labels:
            query["label"] = ",".join(f"{k}={v}" for k, v in labels.items())
        if phase:
            query["phase"] = phase if isinstance(phase, str) else ",".join(phase)
        if all:
            query["all"] = True
        after: Optional[str] = None
        while True:
            page = self._client._transport.call("GET", "/v1/sandboxes", query=dict(query, after=after))
            for s in page.get("sandboxes") or []:
                yield Sandbox(self._client, s)
            after = page.get("next")
            if not after:
                return


class Snapshots:
    """``client.snapshots``: saved files of sandboxes (docs/snapshots.md).
    ``Sandbox.snapshot()`` makes one, ``sandboxes.create(from_=…)`` starts
    from one. Answers are the API's snapshot objects as dicts (``id``,
    ``name``, ``state``, ``sandbox_id``, ``image``, ``size_bytes``, …)."""

    def __init__(self, client: Client) -> None:
        self._t = client._transport

    def list(self, sandbox: Optional[str] = None) -> List[Dict[str, Any]]:
        """The tenant's snapshots not deleted (an admin: every tenant's),
        newest first; ``sandbox`` (id or name): only those made of it."""
        return self._t.call("GET", "/v1/snapshots", query={"sandbox": sandbox})["snapshots"]

    def get(self, ref: str) -> Dict[str, Any]:
        """A snapshot by id (``snp_…``) or name; another tenant's is
        :class:`NotFound`."""
        return self._t.call("GET", f"/v1/snapshots/{_q(ref)}")["snapshot"]

    def delete(self, ref: str) -> Dict[str, Any]:
        """Deletes a snapshot at once (``state`` ``deleted``; its name is free
        again); its worker removes the bytes once no sandbox runs from it."""
        return self._t.call("DELETE", f"/v1/snapshots/{_q(ref)}")["snapshot"]


class Volumes:
    """``client.volumes``: a tenant's file systems that outlive sandboxes
    (docs/volumes.md); ``sandboxes.create(volumes=[…])`` mounts one. Answers
    are the API's volume objects as dicts (``id``, ``name``, ``state``,
    ``size_mib``, ``worker``, ``mounted_by``, …)."""

    def __init__(self, client: Client) -> None:
        self._t = client._transport

    def create(self, name: str, size_mib: int, tenant: Optional[str] = None) -> Dict[str, Any]:
        """A new volume of ``size_mib`` MiB (8 to 16777216), ``unplaced``
        until a sandbox first mounts it. A name taken is :class:`Conflict`,
        over the tenant's quota :class:`QuotaExceeded`, volumes turned off
        :class:`PolicyDenied`."""
        body = _spec(name=name, size_mib=int(size_mib), tenant=tenant)
        return self._t.call("POST", "/v1/volumes", json=body)["volume"]

    def list(self) -> List[Dict[str, Any]]:
        """The tenant's volumes not deleted (an admin: every tenant's),
        newest first."""
        return self._t.call("GET", "/v1/volumes")["volumes"]

    def get(self, ref: str) -> Dict[str, Any]:
        """A volume by id (``vol_…``) or name; another tenant's is
        :class:`NotFound`."""
        return self._t.call("GET", f"/v1/volumes/{_q(ref)}")["volume"]

    def delete(self, ref: str) -> Dict[str, Any]:
        """Deletes a volume at once (``state`` ``deleted``; its name is free
        again); :class:`Conflict` while a live sandbox mounts it. Its worker
        removes the bytes."""
        return self._t.call("DELETE", f"/v1/volumes/{_q(ref)}")["volume"]


class Operations:
    """``client.operations``"""

    def __init__(self, client: Client) -> None:
        self._client = client

    def get(self, id: str) -> Operation:
        return Operation(self._client, self._client._transport.call("GET", f"/v1/operations/{_q(id)}")["operation"])

    def wait(self, id: str, timeout: Optional[float] = None) -> Operation:
        """Operation.wait() of the operation ``id``."""
        return Operation(self._client, {"id": id, "state": "pending"}).wait(timeout)

    def cancel(self, id: str) -> Operation:
        return Operation(self._client, {"id": id}).cancel()


class EventStream(Iterator[Dict[str, Any]]):
    """Events after a cursor. ``next_after`` is always the cursor to ask
    with next (kept across pages and long-polls, so nothing is missed or
    seen twice)."""

    _PAGE = 1000

    def __init__(
        self,
        client: Client,
        after: Optional[int],
        sandbox: Optional[str],
        operation: Optional[str],
        kind: Optional[str],
        follow: bool,
        wait: int,
    ) -> None:
        self._client = client
        self.next_after: int = int(after or 0)
        self._filters = {"sandbox": sandbox, "operation": operation, "kind": kind}
        self.follow = follow
        self.wait = max(1, min(int(wait), 60))
        self._pending: List[Dict[str, Any]] = []
        self._end = False

    def __iter__(self) -> "EventStream":
        return self

    def __next__(self) -> Dict[str, Any]:
        while not self._pending:
            if self._end:
                raise StopIteration
            wait = self.wait if self.follow else 0
            query: Dict[str, QueryValue] = dict(self._filters, after=self.next_after, limit=self._PAGE)
            if wait:
                query["wait"] = wait
            page = self._client._transport.call("GET", "/v1/events", query=query, timeout=self._client.timeout + wait)
            events = page.get("events") or []
            self._pending.extend(events)
            self.next_after = int(page.get("next_after", self.next_after))
            if not self.follow and len(events) < self._PAGE:
                self._end = True
        return self._pending.pop(0)


class Tenants:
    """``client.tenants`` (admin; a member sees its own tenant)."""

    def __init__(self, client: Client) -> None:
        self._t = client._transport

    def create(self, name: str) -> Dict[str, Any]:
        return self._t.call("POST", "/v1/tenants", json={"name": name})["tenant"]

    def list(self) -> List[Dict[str, Any]]:
        return self._t.call("GET", "/v1/tenants")["tenants"]

    def get(self, name: str) -> Dict[str, Any]:
        """The tenant with its ``usage`` (and ``policy`` when it has one)."""
        return self._t.call("GET", f"/v1/tenants/{_q(name)}")["tenant"]

    def delete(self, name: str) -> Dict[str, Any]:
        return self._t.call("DELETE", f"/v1/tenants/{_q(name)}")["tenant"]

    def set_policy(self, name: str, policy: Mapping[str, Any]) -> Dict[str, Any]:
        """Replaces the tenant's policy (docs/api.md, Tenants and tokens)."""
        return self._t.call("PUT", f"/v1/tenants/{_q(name)}/policy", json=dict(policy))["tenant"]


class Tokens:
    """``client.tokens`` (admin)."""

    def __init__(self, client: Client) -> None:
        self._t = client._transport

    def create(
        self,
        tenant: str,
        role: str = "member",
        *,
        name: Optional[str] = None,
        ttl_seconds: Optional[int] = None,
        worker: Optional[str] = None,
    ) -> Dict[str, Any]:
        """``{"token":{…},"secret":"sbt_…"}``: the secret is shown only here."""
        return self._t.call(
            "POST",
            "/v1/tokens",
            json=_spec(tenant=tenant, role=role, name=name, ttl_seconds=ttl_seconds, worker=worker),
        )

    def list(self, tenant: Optional[str] = None) -> List[Dict[str, Any]]:
        return self._t.call("GET", "/v1/tokens", query={"tenant": tenant})["tokens"]

    def revoke(self, id: str) -> Dict[str, Any]:
        return self._t.call("DELETE", f"/v1/tokens/{_q(id)}")["token"]


class Pools:
    """``client.pools``: warm pools."""

    def __init__(self, client: Client) -> None:
        self._t = client._transport

    def create(self, name: str, size: int, **spec: Any) -> Dict[str, Any]:
        """A pool of ``size`` running sandboxes of ``spec`` (tenant, image,
        cpu_millis, memory_mib, disk_mib, network, isolation, read_only_root,
        trust, ttl_seconds)."""
        return self._t.call("POST", "/v1/pools", json=_spec(name=name, size=size, **spec))["pool"]

    def list(self) -> List[Dict[str, Any]]:
        return self._t.call("GET", "/v1/pools")["pools"]

    def get(self, name: str) -> Dict[str, Any]:
        return self._t.call("GET", f"/v1/pools/{_q(name)}")["pool"]

    def delete(self, name: str) -> Dict[str, Any]:
        return self._t.call("DELETE", f"/v1/pools/{_q(name)}")["pool"]


class Workers:
    """``client.workers`` (admin)."""

    def __init__(self, client: Client) -> None:
        self._t = client._transport

    def list(self) -> List[Dict[str, Any]]:
        return self._t.call("GET", "/v1/workers")["workers"]

    def drain(self, name: str) -> Dict[str, Any]:
        return self._t.call("POST", f"/v1/workers/{_q(name)}/drain")["worker"]

    def resume(self, name: str) -> Dict[str, Any]:
        return self._t.call("POST", f"/v1/workers/{_q(name)}/resume")["worker"]
