"""The policy gate's static half: the DynamoDB permissions every repository method needs, read from the
store's source, held against what each service role is declared to call and what the template grants it.

The recording half (``aws_policy_gate.py``) sees only what the tests drove; a branch no test takes could call
a repository method whose permission the role's policy lacks, and production would answer AccessDenied there
first. This half needs no run:

- ``store_permissions`` reads ``daemon/store/*.py`` and derives, for every public method of every repository
  (a ``Repository`` subclass), the (action, table, index) permissions it needs, following the helpers it
  calls (``self._query``, ``self.dynamo.batch_write``, ...), the operation names they pass on, the index a
  Query names, and the items of its transactions (each its own action, as IAM checks them). What the source
  alone cannot say is in two small registries, each checked against the source: ``ONLY_WITH`` (a helper's
  call made only when its caller passes an argument) and ``PASSED_ITEMS`` (transaction items a caller builds
  with another method).
- ``ROLE_CALLS`` declares which service role calls which repository method, and ``NOT_A_SERVICE_CALL`` the
  methods no service role calls (and who does). ``call_sites`` finds the repository methods each role's code
  names (the engine: ``actors/``, ``daemon/runtime/``; the API: ``daemon/api/``), so the declaration cannot
  drift from the code.
- ``check`` fails on: a method that issues a DynamoDB call no role may make (declared nowhere and called by
  no declared method); a role's code naming a method its declaration lacks, or a declaration naming one its
  code does not call; a declared method needing a permission the role's template policy does not grant.

``template_grants`` reads the role policies from the template itself (no deploy), so a test can remove a
grant from a copy and see the failure. Nothing here is shipped.
"""

from __future__ import annotations

import ast
import copy
import io
import threading
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import trio

from tests.harness.aws_stack import TASK_ROLES
from tests.harness.dynamodb_iam import TRANSACT_WRITE_ACTIONS, Permission, granted_permissions

PROJECT_ROOT = Path(__file__).resolve().parents[2]
STORE = PROJECT_ROOT / "daemon" / "store"
BASE_CLASS = "Repository"
# The source each service role runs: where its repository calls are.
ROLE_SOURCES: dict[str, tuple[str, ...]] = {"engine": ("actors", "daemon/runtime"), "api": ("daemon/api",)}

# --- the declaration ----------------------------------------------------------------------------------------

ROLE_CALLS: dict[str, frozenset[str]] = {
    "engine": frozenset(
        {
            # the orchestrator, the match actors and their wind-up
            "ActiveMatchRepository.claim_active_match",
            "ActiveMatchRepository.clear_alert_intent",
            "ActiveMatchRepository.deactivate_match",
            "ActiveMatchRepository.get_active_match_state",
            "ActiveMatchRepository.get_all_active_matches",
            "ActiveMatchRepository.mark_follows_removed",
            "ActiveMatchRepository.move_alert_watermark",
            "ActiveMatchRepository.register_active_match",
            "ActiveMatchRepository.release_match",
            "ActiveMatchRepository.reopen_ended_match",
            "ActiveMatchRepository.update_match_state",
            "DisplayStateCacheRepository.set_cached_display_state",
            "LiveActivityRepository.end_la_sessions",
            "LiveActivityRepository.get_all_la_sessions_for_match",
            "MatchFollowRepository.get_followers_for_match",
            "MatchFollowRepository.remove_all_follows_for_match",
            # push-to-start (the owner's and the prematch job's) and the token janitor
            "DeviceRepository.clear_push_to_start_token",
            "DeviceRepository.delete_device",
            "DeviceRepository.get_devices_of_users",
            "LiveActivityRepository.suspend_la_session",
            "LockRepository.claim_push_to_starts",
            "LockRepository.confirm_push_to_starts",
            "LockRepository.release_push_to_starts",
            # leases: matches, the feed leader, the region's jobs, prematch's per-match lock
            "LockRepository.acquire",
            "LockRepository.acquire_fenced",
            "LockRepository.extend",
            "LockRepository.extend_fenced",
            "LockRepository.get",
            "LockRepository.lease_condition",
            "LockRepository.read",  # ctl feed: who leads the region
            "LockRepository.release",
            "LockRepository.release_fenced",
            # a hot match shared by the fleet: the hot list, the boards, the shards' records
            "LockRepository.get_hot_list",
            "LockRepository.get_share_boards",
            "LockRepository.get_shards",
            "LockRepository.publish_share_board",
            "LockRepository.put_hot_match",
            "LockRepository.remove_hot_match",
            "LockRepository.remove_share_board",
            "LockRepository.say_helping",
            "LockRepository.stop_helping",
            # the feed leader's fenced cache and its readers
            "FixtureCacheRepository.batch_get_entries",
            "FixtureCacheRepository.batch_get_region_stamps",
            "FixtureCacheRepository.get_livescores_summary_and_state",
            "FixtureCacheRepository.put_fixtures_fenced",
            # fixtures: the sync, the reconciler, the broadcast channels, the orchestrator's schedule
            "FixtureRepository.archive_fixture",
            "FixtureRepository.batch_get_fixtures",
            "FixtureRepository.batch_write_fixtures",
            "FixtureRepository.claim_broadcast_channels",
            "FixtureRepository.get_fixture",
            "FixtureRepository.get_matches_by_date_range",
            "FixtureRepository.swap_broadcast_channels",
            "FixtureRepository.update_fixture_fields",
            # the reference sync
            "LeagueRepository.get_active_leagues",
            "LeagueRepository.get_all_leagues",
            "LeagueRepository.put_league",
            "LeagueRepository.update_league_fields",
            "TeamRepository.batch_write_teams",
            "TeamRepository.get_all_teams",
            "TeamRepository.get_team",
            "TeamRepository.update_team_fields",
            "TeamSeasonRepository.get_teams_for_season",
            "TeamSeasonRepository.write_season_team_records",
            # the prematch job's markers
            "MatchFollowRepository.claim_prematch",
            "MatchFollowRepository.confirm_prematch",
            "MatchFollowRepository.get_prematch_pending",
            "MatchFollowRepository.has_followers",
            "MatchFollowRepository.reclaim_prematch",
        }
    ),
    "api": frozenset(
        {
            "DeviceRepository.claim_device",
            "DeviceRepository.delete_device",
            "DeviceRepository.get_device_for_user",
            "DisplayStateCacheRepository.get_cached_display_state",
            "FixtureCacheRepository.batch_get_cached_fixtures",
            "FixtureCacheRepository.get_cached_fixture",
            "FixtureCacheRepository.get_fixtures_by_league",
            "FixtureRepository.batch_get_fixtures",
            "FixtureRepository.get_fixture",
            "FixtureRepository.get_matches_by_date_range",
            "LeagueRepository.delete_league",
            "LeagueRepository.get_all_leagues",
            "LeagueRepository.get_league",
            "LeagueRepository.update_league_fields",
            "LiveActivityRepository.end_la_session",
            "LiveActivityRepository.end_user_sessions",
            "LiveActivityRepository.get_user_la_sessions_page",
            "LiveActivityRepository.register_owned_sessions",
            "LiveActivityRepository.update_token",
            "LockRepository.get",
            "MatchFollowRepository.check_if_user_follows_match",
            "MatchFollowRepository.follow_match",
            "MatchFollowRepository.unfollow_match",
            "MatchFollowRepository.update_follow_team",
            "TeamRepository.get_all_teams",
            "TeamRepository.get_team",
            "TeamRepository.update_team_fields",
            "TeamSeasonRepository.get_teams_for_season",
        }
    ),
}

# Repository methods no service role calls, and who does: they need no grant, and a role's code that
# starts calling one fails ``check`` until it is declared for that role.
NOT_A_SERVICE_CALL: dict[str, str] = {
    "Repository.import_items": "bulk loads: migrations from the legacy backend and the test rigs' seeding",
    "ActiveMatchRepository.delete_active_match": "manual cleanup by an operator (data model: Admin)",
    "ActiveMatchRepository.update_cooldowns": "the store's own tests; the match actor writes cooldowns "
    "with its state (update_match_state)",
    "DeviceRepository.get_devices_for_user": "the store's tests and the test rigs' checks",
    "DeviceRepository.token_owner": "the store's tests and the test rigs' checks",
    "FixtureCacheRepository.batch_get_stamps": "the store's tests (readers use batch_get_region_stamps)",
    "FixtureCacheRepository.batch_put_fixtures": "benchmarks and the store's tests (the leader writes fenced)",
    "FixtureCacheRepository.get_all_cached_fixtures": "the store's tests",
    "FixtureCacheRepository.get_livescores_summary": "the store's tests (readers use "
    "get_livescores_summary_and_state)",
    "FixtureCacheRepository.put_livescores_summary": "the store's tests (the leader writes the summary "
    "with its fixtures in put_fixtures_fenced)",
    "FixtureCacheRepository.put_single_fixture": "the store's tests (the leader writes fenced)",
    "LiveActivityRepository.get_la_session": "the test rigs' checks",
    "LiveActivityRepository.register_la_session": "the store's tests (the API registers in batches)",
    "LiveActivityRepository.register_la_sessions": "the store's tests (the API registers through "
    "register_owned_sessions: each update token claimed, each user's sessions bounded)",
    "LiveActivityRepository.get_user_la_sessions": "the store's tests (the API pages through "
    "get_user_la_sessions_page)",
    "DeviceRepository.register_device": "the store's and the actors' tests (the API registers through "
    "claim_device: every push token claimed)",
    "DeviceRepository.update_push_to_start_token": "the store's tests (the API claims a new push-to-start "
    "token through claim_device)",
    "MatchFollowRepository.clear_prematch_mark": "the store's tests (the prematch job confirms or reclaims)",
    "MatchFollowRepository.mark_prematch_notified": "the store's tests (the prematch job claims with "
    "claim_prematch)",
}

# --- registries the source cannot say, each checked against it -----------------------------------------------

# (class, method, the self-call in it): that call is made only when the method's parameter is given a value
# other than None (``_put_or_old`` reads the item back only after a refused condition, and only a peer that
# ignores ReturnValuesOnConditionCheckFailure gets there at all; without a condition it never does).
ONLY_WITH: dict[tuple[str, str, str], str] = {(BASE_CLASS, "_put_or_old", "_get"): "condition"}
# (class, method): transaction items its caller passes in, built by this other (class, method).
PASSED_ITEMS: dict[tuple[str, str], tuple[str, str]] = {
    ("FixtureCacheRepository", "put_fixtures_fenced"): ("LockRepository", "lease_condition")
}


class SourceError(Exception):
    """The store's source does something this reader cannot follow: teach it, rather than guess."""


# --- reading the store --------------------------------------------------------------------------------------


@dataclass
class RepositoryClass:
    name: str
    table: str | None  # the logical table (``logical = ...``); None for the base class
    methods: dict[str, ast.FunctionDef | ast.AsyncFunctionDef] = field(default_factory=dict)
    bases: list[str] = field(default_factory=list)


def _camel(operation: str) -> str:
    """``put_item`` -> ``PutItem`` (an API name stays as it is)."""
    return "".join(part[:1].upper() + part[1:] for part in operation.split("_"))


def _is_self_attr(node: ast.AST, *chain: str) -> bool:
    """``node`` is ``self.<chain[0]>.<chain[1]>...``."""
    for name in reversed(chain):
        if not (isinstance(node, ast.Attribute) and node.attr == name):
            return False
        node = node.value
    return isinstance(node, ast.Name) and node.id == "self"


class StoreSource:
    """The repositories of ``daemon/store`` as source: their tables, methods and the constants they use."""

    def __init__(self, root: Path = STORE, sources: Mapping[str, str] | None = None) -> None:
        texts = (
            dict(sources)
            if sources is not None
            else {p.name: p.read_text() for p in sorted(root.glob("*.py"))}
        )
        self.constants: dict[str, Any] = {}
        classes: dict[str, tuple[ast.ClassDef, list[str]]] = {}
        for name, text in texts.items():
            tree = ast.parse(text, name)
            for node in tree.body:
                if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant):
                    for target in node.targets:
                        if isinstance(target, ast.Name):
                            self.constants[target.id] = node.value.value
                elif isinstance(node, ast.ClassDef):
                    bases = [b.id for b in node.bases if isinstance(b, ast.Name)]
                    classes[node.name] = (node, bases)
        self.classes: dict[str, RepositoryClass] = {}
        for name, (node, bases) in classes.items():
            if name != BASE_CLASS and not self._derives(name, classes):
                continue
            table = None
            methods: dict[str, ast.FunctionDef | ast.AsyncFunctionDef] = {}
            for item in node.body:
                if isinstance(item, ast.Assign) and any(
                    isinstance(t, ast.Name) and t.id == "logical" for t in item.targets
                ):
                    table = self.constant(item.value, {})
                elif isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef):
                    methods[item.name] = item
            self.classes[name] = RepositoryClass(name, table, methods, bases)
        if BASE_CLASS not in self.classes:
            raise SourceError(f"no class {BASE_CLASS} in the store")

    @staticmethod
    def _derives(name: str, classes: Mapping[str, tuple[ast.ClassDef, list[str]]]) -> bool:
        seen: set[str] = set()
        todo = list(classes[name][1])
        while todo:
            base = todo.pop()
            if base == BASE_CLASS:
                return True
            if base in classes and base not in seen:
                seen.add(base)
                todo.extend(classes[base][1])
        return False

    def constant(self, node: ast.AST | None, bound: Mapping[str, Any]) -> Any:
        """The value of a constant expression: a literal, a module constant or a bound parameter."""
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.Name):
            if node.id in bound:
                return bound[node.id]
            if node.id in self.constants:
                return self.constants[node.id]
        raise SourceError(f"not a constant: {ast.unparse(node) if node is not None else None}")

    def repositories(self) -> list[str]:
        return sorted(n for n, c in self.classes.items() if c.table is not None)

    def lookup(self, cls: str, method: str) -> tuple[str, ast.FunctionDef | ast.AsyncFunctionDef] | None:
        """(the class defining it, its node) for ``self.<method>`` in ``cls``, looked up through its bases."""
        todo = [cls]
        while todo:
            owner = todo.pop(0)
            found = self.classes.get(owner)
            if found is None:
                continue
            node = found.methods.get(method)
            if node is not None:
                return owner, node
            todo.extend(found.bases)
        return None

    def public_methods(self) -> list[str]:
        """``Class.method`` of every public repository method (the base class's under its own name)."""
        out = [
            f"{c}.{m}" for c in self.repositories() for m in self.classes[c].methods if not m.startswith("_")
        ]
        out += [f"{BASE_CLASS}.{m}" for m in self.classes[BASE_CLASS].methods if not m.startswith("_")]
        return sorted(out)


@dataclass
class _Walk:
    """One method's reading: the permissions it needs, whether it issues a transaction, the public methods it
    calls on its own repository."""

    permissions: set[Permission] = field(default_factory=set)
    transacts: bool = False
    calls: set[str] = field(default_factory=set)


class StoreReader:
    """Derives what each repository method needs (see the module doc)."""

    def __init__(self, source: StoreSource) -> None:
        self.source = source
        self._walks: dict[tuple[Any, ...], _Walk] = {}

    def permissions(self, qualified: str) -> set[Permission]:
        """The permissions ``Class.method`` needs (``Repository.m``: on every repository's table)."""
        cls, method = qualified.split(".", 1)
        classes = self.source.repositories() if cls == BASE_CLASS else [cls]
        out: set[Permission] = set()
        for concrete in classes:
            out |= self._walk(concrete, method, {}, None, ()).permissions
        return out

    def calls(self, qualified: str) -> set[str]:
        """The public methods of its own repository ``Class.method`` calls (``self.other(...)``)."""
        cls, method = qualified.split(".", 1)
        classes = self.source.repositories() if cls == BASE_CLASS else [cls]
        out: set[str] = set()
        for concrete in classes:
            out |= self._walk(concrete, method, {}, None, ()).calls
        return out

    def _walk(
        self, cls: str, method: str, bound: Mapping[str, Any], index: str | None, stack: tuple[str, ...]
    ) -> _Walk:
        key = (cls, method, tuple(sorted(bound.items(), key=lambda kv: kv[0])), index)
        walk = self._walks.get(key)
        if walk is None:
            walk = self._walks[key] = self._read(cls, method, bound, index, stack)
        return walk

    def _read(
        self, cls: str, method: str, bound: Mapping[str, Any], index: str | None, stack: tuple[str, ...]
    ) -> _Walk:
        found = self.source.lookup(cls, method)
        if found is None:
            raise SourceError(f"{cls}.{method}: no such method")
        owner, node = found
        if method in stack:
            raise SourceError(f"{cls}.{method}: calls itself ({' -> '.join((*stack, method))})")
        stack = (*stack, method)
        bound = {**self._defaults(node), **bound}
        table = self.source.classes[cls].table
        walk = _Walk()
        for call in (n for n in ast.walk(node) if isinstance(n, ast.Call)):
            func = call.func
            if _is_self_attr(func, "dynamo", "call") or _is_self_attr(func, "dynamo", "paginate"):
                op = _camel(str(self._arg(call, 1, "operation", bound)))
                where = self._table(call.args[0] if call.args else None, table, bound)
                if op == "TransactWriteItems":
                    walk.transacts = True
                    continue
                named = next((k.value for k in call.keywords if k.arg == "IndexName"), None)
                if named is None and op in ("Query", "Scan"):
                    named = self._spread_index(node, call)
                at = self._index(named, bound) if named is not None else index
                walk.permissions.add(Permission(op, where, at if op in ("Query", "Scan") else None))
            elif _is_self_attr(func, "dynamo", "batch_write") or _is_self_attr(func, "dynamo", "batch_get"):
                writes = isinstance(func, ast.Attribute) and func.attr == "batch_write"
                op = "BatchWriteItem" if writes else "BatchGetItem"
                walk.permissions.add(
                    Permission(op, self._table(call.args[0] if call.args else None, table, bound))
                )
            elif _is_self_attr(func, "dynamo", "table"):
                continue
            elif isinstance(func, ast.Attribute) and _is_self_attr(func.value, "dynamo"):
                raise SourceError(f"{cls}.{method}: self.dynamo.{func.attr} is not a call this reader knows")
            elif (
                isinstance(func, ast.Attribute)
                and isinstance(func.value, ast.Name)
                and func.value.id == "self"
            ):
                callee = func.attr
                target = self.source.lookup(cls, callee)
                if target is None:
                    continue  # an attribute that is not a method (a clock, say)
                guard = ONLY_WITH.get((owner, method, callee))
                if guard is not None and bound.get(guard) is None:
                    continue
                named_index = next((k.value for k in call.keywords if k.arg in ("index", "IndexName")), None)
                inner = self._walk(
                    cls,
                    callee,
                    self._bind(target[1], call, bound),
                    self._index(named_index, bound) if named_index is not None else index,
                    stack,
                )
                walk.permissions |= inner.permissions
                walk.transacts |= inner.transacts
                if not callee.startswith("_"):
                    walk.calls.add(f"{cls}.{callee}")
                walk.calls |= inner.calls
        if walk.transacts:
            walk.permissions |= self.items(cls, node)
            passed = PASSED_ITEMS.get((cls, method))
            if passed is not None:
                walk.permissions |= self.items(passed[0], self.source.classes[passed[0]].methods[passed[1]])
        return walk

    def _spread_index(self, scope: ast.AST, call: ast.Call) -> ast.AST | None:
        """The ``IndexName`` a call's ``**name`` passes: ``name`` must be a dict literal assigned once in the
        method, with ``IndexName`` among its keys or set by a later ``name["IndexName"] = ...`` (the method's
        own ``**kwargs`` carries what its callers passed, read through the call chain's ``index``)."""
        spread = [k.value for k in call.keywords if k.arg is None]
        if not spread:
            return None
        found: ast.AST | None = None
        varkw = (
            scope.args.kwarg.arg
            if isinstance(scope, ast.FunctionDef | ast.AsyncFunctionDef) and scope.args.kwarg
            else None
        )
        for value in spread:
            if not isinstance(value, ast.Name):
                raise SourceError(f"{ast.unparse(call)}: a ** argument that is not a local name")
            if value.id == varkw:
                continue  # the method's own **kwargs: its callers' index reaches here as ``index``
            literal = self._assigned(scope, value.id)
            if not isinstance(literal, ast.Dict):
                raise SourceError(f"{value.id} is not a dict literal where a call spreads it")
            for k, v in zip(literal.keys, literal.values, strict=True):
                if isinstance(k, ast.Constant) and k.value == "IndexName":
                    found = v
            for n in ast.walk(scope):
                if not isinstance(n, ast.Assign):
                    continue
                for t in n.targets:
                    if (
                        isinstance(t, ast.Subscript)
                        and isinstance(t.value, ast.Name)
                        and t.value.id == value.id
                        and isinstance(t.slice, ast.Constant)
                        and t.slice.value == "IndexName"
                    ):
                        found = n.value
        return found

    def items(self, cls: str, node: ast.AST) -> set[Permission]:
        """The permissions of the transaction items written out in ``node`` (``{"Put": {...}}`` ...)."""
        table = self.source.classes[cls].table
        out: set[Permission] = set()
        for d in (n for n in ast.walk(node) if isinstance(n, ast.Dict)):
            if len(d.keys) != 1 or not isinstance(d.keys[0], ast.Constant):
                continue
            kind = d.keys[0].value
            if kind not in TRANSACT_WRITE_ACTIONS:
                continue
            request: ast.AST = d.values[0]
            if isinstance(request, ast.Name):
                request = self._assigned(node, request.id)
            if not isinstance(request, ast.Dict):
                raise SourceError(f"{cls}: a {kind} item whose request is not a dict literal")
            names = {
                k.value: v
                for k, v in zip(request.keys, request.values, strict=True)
                if isinstance(k, ast.Constant)
            }
            if "TableName" not in names:
                raise SourceError(f"{cls}: a {kind} item without TableName")
            out.add(
                Permission(TRANSACT_WRITE_ACTIONS[kind], self._item_table(node, names["TableName"], table))
            )
        return out

    def _item_table(self, scope: ast.AST, expr: ast.AST, own: str | None) -> str:
        if isinstance(expr, ast.Name):
            expr = self._assigned(scope, expr.id)
        if isinstance(expr, ast.Call) and _is_self_attr(expr.func, "dynamo", "table") and expr.args:
            return self._table(expr.args[0], own, {})
        raise SourceError(
            f"a transaction item's TableName is not self.dynamo.table(...): {ast.unparse(expr)}"
        )

    @staticmethod
    def _assigned(scope: ast.AST, name: str) -> ast.AST:
        values = [
            n.value
            for n in ast.walk(scope)
            if isinstance(n, ast.Assign | ast.AnnAssign)
            and any(
                isinstance(t, ast.Name) and t.id == name
                for t in (n.targets if isinstance(n, ast.Assign) else [n.target])
            )
            and n.value is not None
        ]
        if len(values) != 1:
            raise SourceError(f"{name} is assigned {len(values)} times where a transaction item uses it")
        return values[0]

    def _table(self, expr: ast.AST | None, own: str | None, bound: Mapping[str, Any]) -> str:
        if _is_self_attr(expr, "logical") if expr is not None else False:
            if own is None:
                raise SourceError("self.logical of the base class")
            return own
        value = self.source.constant(expr, bound)
        return str(value)

    def _index(self, expr: ast.AST, bound: Mapping[str, Any]) -> str | None:
        value = self.source.constant(expr, bound)
        return None if value is None else str(value)

    def _arg(self, call: ast.Call, position: int, name: str, bound: Mapping[str, Any]) -> Any:
        if len(call.args) > position:
            return self.source.constant(call.args[position], bound)
        for k in call.keywords:
            if k.arg == name:
                return self.source.constant(k.value, bound)
        raise SourceError(f"{ast.unparse(call)}: no {name}")

    def _defaults(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> dict[str, Any]:
        args = node.args
        out: dict[str, Any] = {}
        positional = [*args.posonlyargs, *args.args]
        for arg, default in zip(
            positional[len(positional) - len(args.defaults) :], args.defaults, strict=True
        ):
            if isinstance(default, ast.Constant):
                out[arg.arg] = default.value
        for arg, kw_default in zip(args.kwonlyargs, args.kw_defaults, strict=True):
            if isinstance(kw_default, ast.Constant):
                out[arg.arg] = kw_default.value
        return out

    def _bind(
        self, callee: ast.FunctionDef | ast.AsyncFunctionDef, call: ast.Call, bound: Mapping[str, Any]
    ) -> dict[str, Any]:
        """The callee's parameters the call gives a constant (or a constant it was given itself); a parameter
        given something else is bound to a marker that is not None."""
        params = [a.arg for a in (*callee.args.posonlyargs, *callee.args.args)]
        static = any(isinstance(d, ast.Name) and d.id == "staticmethod" for d in callee.decorator_list)
        params = params if static else params[1:]  # without self
        given: list[tuple[str, ast.AST]] = list(zip(params, call.args, strict=False))
        given += [(k.arg, k.value) for k in call.keywords if k.arg is not None]
        out: dict[str, Any] = {}
        for name, expr in given:
            try:
                out[name] = self.source.constant(expr, bound)
            except SourceError:
                out[name] = _GIVEN
        return out

    def check_registries(self) -> list[str]:
        """The registries against the source: each entry must name something the source does."""
        problems: list[str] = []
        for (cls, method, callee), guard in ONLY_WITH.items():
            node = self.source.classes[cls].methods.get(method)
            params = {a.arg for a in (*node.args.args, *node.args.kwonlyargs)} if node else set()
            calls = {
                n.func.attr
                for n in ast.walk(node or ast.Module(body=[], type_ignores=[]))
                if isinstance(n, ast.Call)
                and isinstance(n.func, ast.Attribute)
                and isinstance(n.func.value, ast.Name)
                and n.func.value.id == "self"
            }
            if node is None or guard not in params or callee not in calls:
                problems.append(f"ONLY_WITH {cls}.{method} -> {callee} (with {guard}): not in the source")
        for (cls, method), (builder_cls, builder) in PASSED_ITEMS.items():
            node = self.source.classes.get(cls, RepositoryClass(cls, None)).methods.get(method)
            build = self.source.classes.get(builder_cls, RepositoryClass(builder_cls, None)).methods.get(
                builder
            )
            if node is None or not self._walk(cls, method, {}, None, ()).transacts:
                problems.append(f"PASSED_ITEMS {cls}.{method}: issues no transaction")
            if build is None or not self.items(builder_cls, build):
                problems.append(f"PASSED_ITEMS {builder_cls}.{builder}: builds no transaction item")
        return problems


_GIVEN = object()


def store_permissions(source: StoreSource | None = None) -> dict[str, set[Permission]]:
    """Every public repository method (``Class.method``) and the permissions it needs."""
    reader = StoreReader(source or StoreSource())
    return {q: reader.permissions(q) for q in reader.source.public_methods()}


# --- the roles' code ----------------------------------------------------------------------------------------

# Method names also used by builtin and trio objects (dict.get, list.extend, a lock's acquire...): they count
# as a repository call only on a receiver named like the repository (``repos.locks.get``, ``self._locks``).
_COMMON_NAMES = frozenset(
    name
    for kind in (
        dict,
        list,
        set,
        str,
        bytes,
        io.IOBase,
        io.RawIOBase,
        trio.Lock,
        trio.CapacityLimiter,
        threading.Lock,
    )
    for name in dir(kind)
)


def repository_attributes(root: Path = STORE) -> dict[str, str]:
    """Repository class -> its attribute on ``Repositories`` (``LockRepository`` -> ``locks``)."""
    tree = ast.parse((root / "__init__.py").read_text())
    out: dict[str, str] = {}
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Assign) and len(node.targets) == 1):
            continue
        target, value = node.targets[0], node.value
        if (
            isinstance(target, ast.Attribute)
            and _is_self_attr(target, target.attr)
            and isinstance(value, ast.Call)
            and isinstance(value.func, ast.Name)
        ):
            out[value.func.id] = target.attr
    return out


def _receiver_name(node: ast.AST) -> str:
    if isinstance(node, ast.Attribute):
        return node.attr.lstrip("_")
    if isinstance(node, ast.Name):
        return node.id.lstrip("_")
    return ""


def call_sites(
    methods: Iterable[str], files: Mapping[str, str], attributes: Mapping[str, str]
) -> dict[str, list[str]]:
    """Where ``files`` (path -> source) name each of ``methods`` (``Class.method``): ``path:line`` each."""
    by_name: dict[str, list[str]] = defaultdict(list)
    for qualified in methods:
        by_name[qualified.split(".", 1)[1]].append(qualified)
    out: dict[str, list[str]] = defaultdict(list)
    for path, text in files.items():
        for node in ast.walk(ast.parse(text, path)):
            if not isinstance(node, ast.Attribute) or not isinstance(node.ctx, ast.Load):
                continue
            for qualified in by_name.get(node.attr, ()):
                cls = qualified.split(".", 1)[0]
                if node.attr in _COMMON_NAMES or len(by_name[node.attr]) > 1:
                    if _receiver_name(node.value) != attributes.get(cls):
                        continue
                out[qualified].append(f"{path}:{node.lineno}")
    return dict(out)


def role_sites(
    methods: Iterable[str], roles: Iterable[str] = ROLE_SOURCES
) -> dict[str, dict[str, list[str]]]:
    """Per role, where its code (``ROLE_SOURCES``) names each of ``methods``."""
    attributes = repository_attributes()
    return {role: call_sites(methods, role_files(role), attributes) for role in roles}


def role_files(role: str, root: Path = PROJECT_ROOT) -> dict[str, str]:
    """The source files of ``role`` (``ROLE_SOURCES``), path relative to the project -> text."""
    out: dict[str, str] = {}
    for folder in ROLE_SOURCES[role]:
        for path in sorted((root / folder).rglob("*.py")):
            out[str(path.relative_to(root))] = path.read_text()
    return out


# --- the template -------------------------------------------------------------------------------------------

_PREFIX = "static-"
_ARN = "arn:aws:dynamodb:eu-west-1:123456789012:table/"


def _resolve(value: Any, tables: Mapping[str, str]) -> Any:
    """A policy value with the template's table references resolved to ARNs (tables named ``_PREFIX`` +
    logical name); other intrinsic functions are left as they are."""
    if isinstance(value, list):
        return [_resolve(v, tables) for v in value]
    if isinstance(value, dict) and list(value) == ["Fn::GetAtt"]:
        resource, attribute = value["Fn::GetAtt"]
        if resource in tables and attribute == "Arn":
            return _ARN + _PREFIX + tables[resource]
    if isinstance(value, dict) and list(value) == ["Fn::Sub"] and isinstance(value["Fn::Sub"], str):
        text = value["Fn::Sub"].replace("${TablePrefix}", _PREFIX)
        for resource, logical in tables.items():
            text = text.replace(f"${{{resource}.Arn}}", _ARN + _PREFIX + logical)
        return text
    return value


def template_grants(template: Mapping[str, Any]) -> tuple[dict[str, set[Permission]], list[str]]:
    """Each service role's DynamoDB permissions as its task role's inline policies grant them, read from the
    template; and what in them is not exact (``granted_permissions``'s list)."""
    resources = template["Resources"]
    tables = {
        logical: str(r["Properties"]["TableName"]["Fn::Sub"]).replace("${TablePrefix}", "")
        for logical, r in resources.items()
        if r.get("Type") == "AWS::DynamoDB::Table"
    }
    grants: dict[str, set[Permission]] = {}
    loose: list[str] = []
    for role, logical in TASK_ROLES.items():
        grants[role] = set()
        for policy in resources[logical]["Properties"].get("Policies") or []:
            document = copy.deepcopy(policy["PolicyDocument"])
            for statement in document.get("Statement") or []:
                if "Resource" in statement:
                    statement["Resource"] = _resolve(statement["Resource"], tables)
            got, bad = granted_permissions(document, _PREFIX)
            grants[role] |= got
            loose += [f"{role} ({logical}): {why}" for why in bad]
    return grants, loose


# --- the check ----------------------------------------------------------------------------------------------


def check(
    grants: Mapping[str, set[Permission]],
    *,
    permissions: Mapping[str, set[Permission]] | None = None,
    declared: Mapping[str, frozenset[str]] = ROLE_CALLS,
    not_a_service_call: Mapping[str, str] = NOT_A_SERVICE_CALL,
    sites: Mapping[str, Mapping[str, list[str]]] | None = None,
    reader: StoreReader | None = None,
) -> list[str]:
    """Problems of the roles' grants against what their declared repository calls need; [] when none.

    ``sites``: per role, where its code names each repository method (default: read from ``ROLE_SOURCES``)."""
    reader = reader or StoreReader(StoreSource())
    needs = dict(permissions) if permissions is not None else store_permissions(reader.source)
    problems = reader.check_registries()
    public = set(needs)
    for role, methods in declared.items():
        problems += [
            f"{role}: declared to call {m}, which is no repository method" for m in sorted(methods - public)
        ]
    problems += [
        f"NOT_A_SERVICE_CALL names {m}, which is no repository method"
        for m in sorted(set(not_a_service_call) - public)
    ]
    # reachable: declared for a role, or called by a method that is
    reachable: set[str] = set()
    todo = [m for methods in declared.values() for m in methods if m in public]
    while todo:
        method = todo.pop()
        if method in reachable:
            continue
        reachable.add(method)
        todo.extend(c for c in reader.calls(method) if c in public)
    for method in sorted(public):
        if needs[method] and method not in reachable and method not in not_a_service_call:
            problems.append(
                f"{method} issues {', '.join(sorted(str(p) for p in needs[method]))} but no role may call it: "
                "declare it in ROLE_CALLS (its role's policy then needs them) or in NOT_A_SERVICE_CALL"
            )
    if sites is None:
        sites = role_sites(public, declared)
    for role, methods in declared.items():
        found = sites.get(role, {})
        for method in sorted(set(found) - methods):
            where = ", ".join(found[method][:3])
            problems.append(f"{role}: its code calls {method} ({where}) but ROLE_CALLS does not declare it")
        for method in sorted(methods - set(found)):
            problems.append(f"{role}: ROLE_CALLS declares {method} but its code never calls it")
    for role, methods in declared.items():
        granted = grants.get(role, set())
        for method in sorted(methods & public):
            for permission in sorted(needs[method] - granted):
                problems.append(
                    f"{role} calls {method}, which needs {permission}: {TASK_ROLES[role]} does not grant it"
                )
    return problems
