"""dynalite (npm) as a fast local DynamoDB peer for the soak benchmark.

moto's server answers a Query of 10,000 Live Activity sessions in ~5 s (its response serialiser costs
~0.4 ms per item) and runs on one thread, so at the soak's 200,000 tokens moto, not the daemons, would be
measured. dynalite (node, LevelDB in memory) answers the same Query in ~0.4 s and is linearizable under
concurrent writers (spec/dynamodb.md §2, §5). Its gaps, and what the project does about them:

- no UpdateTimeToLive: ``create_tables`` logs ``dynamodb_ttl_unsupported`` and goes on (every read
  filters expired items; nothing relies on TTL deletion);
- ``ReturnValuesOnConditionCheckFailure`` ignored: the repositories read the item instead;
- no streams (the daemon uses none);
- no TransactWriteItems (the feed leader's fenced cache writes: a ConditionCheck on its ``feed:{region}``
  lease beside up to 99 Puts): ``LAUNCHER`` puts its own 'request' listener in front of dynalite's that
  hands every other call to dynalite unchanged and runs a transaction as single-item calls to dynalite
  itself (same headers, another target). It validates the request as DynamoDB does (1 to 100 actions,
  each exactly one of ConditionCheck/Put/Update/Delete, one action per item) and answers
  ``ValidationException`` otherwise; then evaluates every condition in order (the ConditionChecks' and
  the writes' own), writing nothing visible: an UpdateItem that REMOVEs an attribute no item has,
  conditioned on the item existing (on an existing item it rewrites the same attributes under dynalite's
  item lock; it never creates one), and when that fails a DeleteItem conditioned on the item not existing
  (deleting a missing item changes nothing) to learn whether the condition holds on a missing item. Any
  failed condition answers ``TransactionCanceledException`` with one ``CancellationReasons`` entry per
  action, in order, and nothing is written; otherwise the writes run as PutItem/UpdateItem/DeleteItem,
  each still carrying its own condition. A transaction's conditions are evaluated all at once, then its
  writes (one action per item, so they do not interfere). Transactions run one after another (a promise
  chain in the node process), so they are isolated from each other. They are NOT atomic against
  non-transactional writers: a lease taken by an UpdateItem between the check and the puts is not seen,
  and a write refused in that window leaves the others in place (logged to dynalite's log).
  ``ClientRequestToken`` idempotency, ``ReturnValuesOnConditionCheckFailure`` and consumed capacity are
  not implemented. That is enough for the benchmark; the fencing property itself is tested on moto,
  which implements transactions atomically (tests/store/test_region_leases.py);
- a client that goes away mid-request (a daemon killed by the soak) makes dynalite 4.0.0 throw from its
  request error handler and exit: ``LAUNCHER`` starts it with a handler that logs that one error and goes
  on (anything else still ends the process).

The tests keep running against moto (the project's reference peer); dynalite is a benchmark option only.
It is installed from the npm registry into ``~/.cache/sightscreen/dynalite`` on first use (node >= 20).
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import IO

from daemon.store.local import die_with_parent, free_port, stop_child

VERSION = "4.0.0"
CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "sightscreen" / "dynalite"


LAUNCHER = r"""
// sightscreen: dynalite with a client that vanishes mid-request logged, not fatal, and TransactWriteItems
// run in front of it as single-item calls to itself (see dynalite.py for what that does not guarantee)
var http = require('http')

process.on('uncaughtException', function (err) {
  if (err && (err.code === 'ECONNRESET' || err.message === 'aborted')) {
    console.error('dynalite: a client went away mid-request (' + err.message + '); going on')
    return
  }
  console.error(err)
  process.exit(1)
})

var HOST = process.argv[2]
var TARGET = 'DynamoDB_20120810.'
var TRANSACT = TARGET + 'TransactWriteItems'
var MAX_ACTIONS = 100
var KINDS = ['ConditionCheck', 'Put', 'Delete', 'Update']
var KEY_NAME = '#sightscreenTxnKey'
var NOOP_NAME = '#sightscreenTxnNoop'
var NOOP_ATTRIBUTE = '__sightscreen_transaction_noop__'  // no item has it: REMOVE of it changes nothing
var HOP_BY_HOP = {'content-length': 1, 'x-amz-target': 1, 'connection': 1, 'expect': 1, 'transfer-encoding': 1}
var agent = new http.Agent({keepAlive: true, maxSockets: 8})
var port = 0
var queue = Promise.resolve()  // transactions run one after another

function send (res, status, contentType, data) {
  var body = JSON.stringify(data)
  res.statusCode = status
  res.setHeader('Content-Type', contentType)
  res.setHeader('Content-Length', Buffer.byteLength(body, 'utf8'))
  res.setHeader('x-amzn-RequestId', 'sightscreen-txn-' + Date.now().toString(36))
  res.end(body)
}

function validation (message) {
  return {status: 400, data: {__type: 'com.amazon.coral.validate#ValidationException', message: message}}
}

// one single-item call to dynalite itself: the incoming request's headers, another target
function call (headers, op, payload) {
  return new Promise(function (resolve, reject) {
    var body = Buffer.from(JSON.stringify(payload))
    var out = {}
    for (var name in headers) if (!HOP_BY_HOP[name]) out[name] = headers[name]
    out['x-amz-target'] = TARGET + op
    out['content-length'] = body.length
    var sub = http.request({host: HOST, port: port, method: 'POST', path: '/', headers: out, agent: agent},
      function (res) {
        var chunks = []
        res.on('data', function (c) { chunks.push(c) })
        res.on('error', reject)
        res.on('end', function () {
          var text = Buffer.concat(chunks).toString()
          var data
          try { data = text ? JSON.parse(text) : {} }
          catch (e) { data = {__type: 'com.amazon.coral.service#InternalFailure', message: text} }
          resolve({status: res.statusCode, data: data})
        })
      })
    sub.on('error', reject)
    sub.end(body)
  })
}

function failedCondition (answer) {
  return answer.status === 400 && /#ConditionalCheckFailedException$/.test(answer.data.__type || '')
}

// The entries of an expression map (names or values) that `expression` names: DynamoDB refuses a call whose
// maps hold entries its expressions do not use, and an Update's maps also serve its UpdateExpression
function referenced (expression, map) {
  var out = {}
  for (var k of Object.keys(map || {}))
    if (new RegExp(k.replace(/[^A-Za-z0-9_]/g, '\\$&') + '(?![A-Za-z0-9_])').test(expression)) out[k] = map[k]
  return out
}

function expressionParts (action, condition) {
  var out = {}
  var values = referenced(condition, action.ExpressionAttributeValues)
  if (Object.keys(values).length) out.ExpressionAttributeValues = values
  return out
}

// Whether `condition` holds on the item at `key`, writing nothing visible: an UpdateItem that REMOVEs an
// attribute no item has, conditioned on the item existing (so it never creates one: on an existing item
// it rewrites the same attributes under dynalite's item lock); when that fails, a DeleteItem conditioned
// on the item NOT existing (deleting a missing item deletes nothing) tells whether the condition holds on
// a missing item. Answers {holds: bool} or {error: answer}.
async function conditionHolds (headers, action, key, condition) {
  var names = referenced(condition, action.ExpressionAttributeNames)
  names[KEY_NAME] = Object.keys(key)[0]
  var onItem = Object.assign({
    TableName: action.TableName,
    Key: key,
    ConditionExpression: '(' + condition + ') AND attribute_exists(' + KEY_NAME + ')',
    UpdateExpression: 'REMOVE ' + NOOP_NAME,
    ExpressionAttributeNames: Object.assign({}, names, {[NOOP_NAME]: NOOP_ATTRIBUTE}),
  }, expressionParts(action, condition))
  var answer = await call(headers, 'UpdateItem', onItem)
  if (answer.status === 200) return {holds: true}
  if (!failedCondition(answer)) return {error: answer}
  var onMissing = Object.assign({
    TableName: action.TableName,
    Key: key,
    ConditionExpression: '(' + condition + ') AND attribute_not_exists(' + KEY_NAME + ')',
    ExpressionAttributeNames: names,
  }, expressionParts(action, condition))
  answer = await call(headers, 'DeleteItem', onMissing)
  if (answer.status === 200) return {holds: true}
  if (!failedCondition(answer)) return {error: answer}
  return {holds: false}
}

function validate (data) {
  var items = data && data.TransactItems
  if (!Array.isArray(items) || items.length === 0)
    return '1 validation error detected: Value null at \'transactItems\' failed to satisfy constraint: ' +
      'Member must not be null and must have length greater than or equal to 1'
  if (items.length > MAX_ACTIONS)
    return '1 validation error detected: Value \'[' + items.length + ' actions]\' at \'transactItems\' ' +
      'failed to satisfy constraint: Member must have length less than or equal to ' + MAX_ACTIONS
  for (var i = 0; i < items.length; i++) {
    var entry = items[i]
    var kinds = entry && typeof entry === 'object' ? Object.keys(entry).filter(function (k) {
      return entry[k] != null
    }) : []
    if (kinds.length !== 1 || KINDS.indexOf(kinds[0]) < 0)
      return 'TransactItems can only contain one of Check, Put, Update or Delete (transactItems.' + (i + 1) +
        ' has ' + (kinds.length ? kinds.join(', ') : 'none') + ')'
    var kind = kinds[0], action = entry[kind], where = 'transactItems.' + (i + 1) + '.member.' + kind
    if (!action || typeof action !== 'object') return where + ': must be an object'
    if (typeof action.TableName !== 'string' || !action.TableName) return where + '.tableName: must not be null'
    if (kind === 'Put') {
      if (!action.Item || typeof action.Item !== 'object') return where + '.item: must not be null'
    }
    else if (!action.Key || typeof action.Key !== 'object' || !Object.keys(action.Key).length)
      return where + '.key: must not be null'
    if (kind === 'ConditionCheck' && !action.ConditionExpression)
      return where + '.conditionExpression: must not be null'
    if (kind === 'Update' && !action.UpdateExpression) return where + '.updateExpression: must not be null'
    var names = action.ExpressionAttributeNames || {}
    if (KEY_NAME in names || NOOP_NAME in names)
      return where + ': ExpressionAttributeNames ' + KEY_NAME + ' and ' + NOOP_NAME + ' are reserved here'
  }
  return null
}

function canonical (value) {
  if (Array.isArray(value)) return '[' + value.map(canonical).join(',') + ']'
  if (value && typeof value === 'object')
    return '{' + Object.keys(value).sort().map(function (k) {
      return JSON.stringify(k) + ':' + canonical(value[k])
    }).join(',') + '}'
  return JSON.stringify(value)
}

async function transact (headers, data) {
  var message = validate(data)
  if (message) return validation(message)
  var actions = data.TransactItems.map(function (entry) {
    var kind = Object.keys(entry).filter(function (k) { return entry[k] != null })[0]
    return {kind: kind, action: entry[kind]}
  })
  // each action's key (a Put's from its item, by the table's key schema); one action per item
  var schemas = {}
  var seen = {}
  for (var i = 0; i < actions.length; i++) {
    var a = actions[i]
    if (a.kind === 'Put') {
      if (!schemas[a.action.TableName]) {
        var described = await call(headers, 'DescribeTable', {TableName: a.action.TableName})
        if (described.status !== 200) return described
        schemas[a.action.TableName] = described.data.Table.KeySchema.map(function (k) { return k.AttributeName })
      }
      a.key = {}
      for (var name of schemas[a.action.TableName]) {
        if (!(name in a.action.Item))
          return validation('One or more parameter values were invalid: Missing the key ' + name + ' in the item')
        a.key[name] = a.action.Item[name]
      }
    }
    else a.key = a.action.Key
    var identity = a.action.TableName + '\u0000' + canonical(a.key)
    if (seen[identity]) return validation('Transaction request cannot include multiple operations on one item')
    seen[identity] = true
  }
  // every condition first (the checks' and the writes' own), all at once (one action per item), writing
  // nothing; the reasons in the actions' order
  var verdicts = await Promise.all(actions.map(function (a) {
    if (!a.action.ConditionExpression) return Promise.resolve({holds: true})
    return conditionHolds(headers, a.action, a.key, a.action.ConditionExpression)
  }))
  var reasons = [], cancelled = false
  for (var verdict of verdicts) {
    if (verdict.error) return verdict.error
    if (verdict.holds) reasons.push({Code: 'None'})
    else {
      reasons.push({Code: 'ConditionalCheckFailed', Message: 'The conditional request failed'})
      cancelled = true
    }
  }
  if (cancelled) {
    return {status: 400, data: {
      __type: 'com.amazonaws.dynamodb.v20120810#TransactionCanceledException',
      message: 'Transaction cancelled, please refer cancellation reasons for specific reasons [' +
        reasons.map(function (r) { return r.Code }).join(', ') + ']',
      CancellationReasons: reasons,
    }}
  }
  // then the writes, all at once (different items), each still carrying its own condition
  var answers = await Promise.all(actions.map(function (a) {
    if (a.kind === 'ConditionCheck') return Promise.resolve(null)
    var payload = Object.assign({}, a.action)
    delete payload.ReturnValuesOnConditionCheckFailure
    var op = a.kind === 'Put' ? 'PutItem' : a.kind === 'Update' ? 'UpdateItem' : 'DeleteItem'
    return call(headers, op, payload).then(function (answer) { return {op: op, answer: answer} })
  }))
  for (i = 0; i < answers.length; i++) {
    if (answers[i] === null || answers[i].answer.status === 200) continue
    console.error('dynalite: transaction action ' + (i + 1) + ' (' + answers[i].op + ') failed after ' +
      'its condition was checked; the other actions stay written: ' + JSON.stringify(answers[i].answer.data))
    return answers[i].answer
  }
  return {status: 200, data: {}}
}

function handleTransaction (req, res) {
  var chunks = []
  req.on('error', function () {})  // the client went away: nothing to answer
  req.on('data', function (c) { chunks.push(c) })
  req.on('end', function () {
    var contentType = (req.headers['content-type'] || 'application/x-amz-json-1.0').split(';')[0].trim()
    var data
    try { data = JSON.parse(Buffer.concat(chunks).toString() || 'null') }
    catch (e) {
      return send(res, 400, contentType, {__type: 'com.amazon.coral.service#SerializationException'})
    }
    var run = queue.then(function () { return transact(req.headers, data) })
    queue = run.catch(function () {})
    run.then(function (answer) { send(res, answer.status, contentType, answer.data) }, function (err) {
      console.error('dynalite: transaction failed: ' + (err && err.stack || err))
      send(res, 500, contentType, {__type: 'com.amazon.coral.service#InternalFailure', message: String(err)})
    })
  })
}

var argv = {createTableMs: 0, deleteTableMs: 0, updateTableMs: 0}
var server = require('dynalite')(argv)
var dynaliteListeners = server.listeners('request')
server.removeAllListeners('request')
server.on('request', function (req, res) {
  if (req.method === 'POST' && req.headers['x-amz-target'] === TRANSACT) return handleTransaction(req, res)
  for (var listener of dynaliteListeners) listener.call(server, req, res)
})
server.listen(+process.argv[3], HOST, function () {
  port = server.address().port
  console.log('dynalite listening at http://' + HOST + ':' + port)
})
"""


def install(cache: Path = CACHE) -> Path:
    """The path of dynalite's cli.js, installing the pinned version with npm when it is not there yet. The
    install holds a lock file in ``cache``, so test workers running in parallel install it once."""
    cli = cache / "node_modules" / "dynalite" / "cli.js"
    if cli.exists():
        return cli
    npm = shutil.which("npm")
    if npm is None or shutil.which("node") is None:
        raise RuntimeError("dynalite needs node >= 20 and npm (Debian: apt-get install nodejs npm)")
    cache.mkdir(parents=True, exist_ok=True)
    with (cache / ".install.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if cli.exists():  # another process installed it while this one waited
            return cli
        if not (cache / "package.json").exists():
            (cache / "package.json").write_text('{"name": "sightscreen-dynalite", "private": true}\n')
        subprocess.run(
            [npm, "install", "--no-audit", "--no-fund", f"dynalite@{VERSION}"],
            cwd=cache,
            check=True,
            stdout=subprocess.DEVNULL,
        )
    if not cli.exists():
        raise RuntimeError(f"npm install dynalite@{VERSION} finished but {cli} is missing")
    return cli


class DynaliteServer:
    """In-memory dynalite on loopback. ``start()`` returns once it answers; ``stop()`` ends it."""

    def __init__(
        self, host: str = "127.0.0.1", port: int = 0, *, log_path: Path | None = None, heap_mb: int = 8192
    ) -> None:
        self.host = host
        self.port = port
        # node's default heap limit (~2-4 GB) is too small for 400,000 items held in memory
        self.heap_mb = heap_mb
        self.log_path = log_path
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self, timeout: float = 30.0) -> DynaliteServer:
        cli = install()
        # beside node_modules (require() finds dynalite), named by its content: a process started from
        # another checkout's launcher at the same moment never reads this one half-written
        digest = hashlib.sha256(LAUNCHER.encode()).hexdigest()[:12]
        launcher = cli.parents[2] / f"sightscreen-dynalite-{digest}.js"
        if not launcher.exists() or launcher.read_text() != LAUNCHER:
            tmp = launcher.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(LAUNCHER)
            tmp.replace(launcher)
        if not self.port:
            self.port = free_port(self.host)
        log: IO[bytes] | None = self.log_path.open("ab") if self.log_path is not None else None
        try:
            self.proc = subprocess.Popen(
                [
                    shutil.which("node") or "node",
                    f"--max-old-space-size={self.heap_mb}",
                    str(launcher),
                    self.host,
                    str(self.port),
                ],
                stdout=subprocess.DEVNULL if log is None else log,
                stderr=subprocess.DEVNULL if log is None else log,
                stdin=subprocess.DEVNULL,
                preexec_fn=die_with_parent,
            )
        finally:
            if log is not None:
                log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"dynalite exited with code {self.proc.returncode} before answering")
            try:
                with urllib.request.urlopen(self.url, timeout=1):
                    return self
            except urllib.error.HTTPError:
                return self  # it answered (400 to a bare GET): up
            except (urllib.error.URLError, ConnectionError, OSError):
                time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"dynalite did not answer on {self.url} within {timeout}s")

    def stop(self) -> None:
        stop_child(self.proc)
        self.proc = None
