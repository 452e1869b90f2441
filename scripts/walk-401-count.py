#!/usr/bin/env python3
"""Counts library file boundaries in callgrind call graphs (helper of scripts/walk-401.sh).

    walk-401-count.py BASE.out WALK.out [WALK2.out ...]

Each file is a callgrind profile of `Benchmarks walk-401 N`. A *library function* is one whose
debug info places it in a file under Sources/URLTask* (URLTaskManager, URLTaskResilience,
URLTaskOAuth2, URLTaskCrypto); a *hop* is one call whose caller and callee are library functions
defined in different files; a call through a thunk of a library module (a protocol witness, a
closure's partial-apply forwarder: compiler-generated, no source file) counts as a call to the
function it forwards to. The in-process server is not the library's path: a call made by a
function of Sources/LoopbackServer, or by a function that only such calls run (reached from them
through library and standard-library functions, and called by nothing else: the server's SHA-256
of each body, in URLTaskCrypto), is neither a hop nor a call that makes a file touched. The
workload (Sources/Benchmarks) is not left out: its interceptor, reactor and closures are the
app's code, which the library calls and which calls the library (the oauth2 walk's
`isTokenRequest: { endpoint.matches($0) }`). Nor is what Foundation or Dispatch calls, even when
the server called them. The walk's figures are WALK minus BASE: hops (calls counted with their
multiplicity), distinct (caller file -> callee file) pairs among them, and the library files and
folders whose functions were called more often, not counting the server's calls. With several
WALK files (WALK2 = 2 walks, ...) each further difference is printed too, as a check that one
walk costs the same each time.
"""
import collections
import os
import re
import sys

LIB = re.compile(r"/Sources/(URLTask[^/]*/.*\.swift)$")


def parse(path):
    """Returns (calls, fn_file): calls[(caller, callee)] = count, fn_file[fn] = file."""
    names = {"fl": {}, "fn": {}}
    kind_of = {"fl": "fl", "fi": "fl", "fe": "fl", "cfi": "fl", "cfl": "fl", "fn": "fn", "cfn": "fn"}

    def name(key, value):
        table = names[kind_of[key]]
        m = re.match(r"\((\d+)\)(?: (.*))?$", value)
        if not m:
            return value
        if m.group(2) is not None:
            table[m.group(1)] = m.group(2)
            return m.group(2)
        return table[m.group(1)]

    calls = collections.Counter()
    fn_file = {}
    called_file = {}
    fl = fn = cfn = cfi = None
    pending = None
    with open(path, errors="replace") as f:
        for line in f:
            line = line.rstrip("\n")
            if pending is not None:  # the cost line after `calls=`
                pending = None
                continue
            key, sep, value = line.partition("=")
            if not sep or key not in ("fl", "fi", "fe", "fn", "cfi", "cfl", "cfn", "calls", "ob", "cob"):
                continue
            if key in ("ob", "cob"):
                continue
            if key == "calls":
                count = int(value.split()[0])
                calls[(fn, cfn)] += count
                if cfi is not None:
                    called_file.setdefault(cfn, cfi)
                cfi = None
                pending = True
                continue
            v = name(key, value)
            if key == "fl":
                fl = v
            elif key == "fn":
                fn = v
                fn_file.setdefault(fn, fl)
                cfi = None
            elif key in ("cfi", "cfl"):
                cfi = v
            elif key == "cfn":
                cfn = v
    for callee, file in called_file.items():
        fn_file.setdefault(callee, file)
    return calls, fn_file


def library(file):
    m = LIB.search(file or "")
    return m.group(1) if m else None


# The lock: taking it is not a step of the walk, as `NSLock.withLock` (Foundation's) is not. The
# library's lock box (`LockedState`: creating it, `withLock` around its `NSLock`) and the engine's
# forwarder to it (`EngineStorage.withLock`) count as outside the library, so the section's
# closure is called "by the lock", as it would be by `NSLock.withLock`.
LOCK = re.compile(r"11LockedStateC|13EngineStorageC8withLock")


# The compiler's outlined value operations (copy, consume, destroy, initialize of an enum or a
# struct: mangled `...WOy`, `WOe`, `WOh`, `WOc`, ...) carry the file of whichever function first
# needed them, not a step of the source: not library functions either.
OUTLINED = re.compile(r"WO[a-z](Tm)?$")


def library_function(fn, fn_file):
    return None if fn and (LOCK.search(fn) or OUTLINED.search(fn)) else library(fn_file.get(fn))


# The library modules' mangled prefixes: a function of theirs with no file under Sources (debug
# info `<compiler-generated>`) is a thunk: a protocol witness, a partial-apply forwarder, a
# reabstraction thunk, a metadata accessor, an outlined copy.
MODULE = re.compile(r"^\$s(14URLTaskManager|17URLTaskResilience|13URLTaskOAuth2|13URLTaskCrypto)")


def through_thunks(calls, fn_file):
    """The call graph with every library thunk taken out: A -> thunk -> B becomes A -> B.

    A thunk's calls out are shared among its callers in proportion to the calls each made into
    it (exact for the usual thunk, which has one caller on the path or forwards to one function).
    """
    calls = {k: float(v) for k, v in calls.items() if k[0] != k[1]}
    thunks = {fn for pair in calls for fn in pair if fn and MODULE.match(fn) and not library(fn_file.get(fn)) and not LOCK.search(fn) and not OUTLINED.search(fn)}
    into = collections.defaultdict(dict)
    out = collections.defaultdict(dict)
    for (a, b), n in calls.items():
        out[a][b] = n
        into[b][a] = n
    for t in sorted(thunks):
        total = sum(into[t].values())
        callers, callees = into.pop(t, {}), out.pop(t, {})
        for a in callers:
            out[a].pop(t, None)
        for b in callees:
            into[b].pop(t, None)
        if total == 0:
            continue
        for a, n in callers.items():
            for b, m in callees.items():
                if a == b:
                    continue
                share = n * m / total
                out[a][b] = out[a].get(b, 0.0) + share
                into[b][a] = into[b].get(a, 0.0) + share
    return {(a, b): n for a, bs in out.items() for b, n in bs.items()}


# The in-process test server the workload starts (LoopbackServer, OAuthServer): its calls into the
# library are not the library's path (it hashes each request body with URLTaskCrypto's SHA-256,
# which no request of the walk needs). The workload itself (Sources/Benchmarks) is the app: its
# interceptor, reactor and closures call the library as an app's would, and count.
SERVER = re.compile(r"/Sources/LoopbackServer/")


# The Swift standard library's functions (module `Swift`, `$ss...`, and its types' standard
# substitutions, `$sSa` Array, `$sSS` String, ...), through which a library function runs its own
# closures (`withUnsafeBytes`). Not Foundation, Dispatch or the runtime (`swift_...`, `swift::`), nor
# concurrency (`$sSc...`) or imported C types (`$sSo...`): what they call is the library's path even
# when the server called them.
STDLIB = re.compile(r"^\$s(s|S[abdDfhiIJnNOpPqQrRsSuvVwWxX])")


def run_by_server(calls, fn_file):
    """The functions only the server runs: called by the server or by such functions alone.

    Reached from a server function through library functions, the library's thunks and the
    standard library, with every caller (in the whole profile) the server or one of them: the
    largest such set, so that the calls between them (SHA256Hasher's own) are left out too.
    """
    def passes(fn):
        return bool(fn) and (bool(library(fn_file.get(fn))) or bool(MODULE.match(fn)) or bool(STDLIB.match(fn)))

    def server(fn):
        return bool(SERVER.search(fn_file.get(fn) or ""))

    callers = collections.defaultdict(set)
    callees = collections.defaultdict(set)
    for (a, b), n in calls.items():
        if n > 0 and a != b:
            callers[b].add(a)
            callees[a].add(b)
    run = set()
    frontier = [fn for fn in callees if server(fn)]
    while frontier:
        fn = frontier.pop()
        for b in callees[fn]:
            if b not in run and passes(b) and not server(b):
                run.add(b)
                frontier.append(b)
    changed = True
    while changed:
        changed = False
        for fn in list(run):
            if any(not server(a) and a not in run for a in callers[fn]):
                run.discard(fn)
                changed = True
    return run, server


def figures(path, thunks=True):
    calls, fn_file = parse(path)
    run, server = run_by_server(calls, fn_file)
    called = collections.Counter()  # library function -> calls into it, the server's left out
    for (caller, callee), count in calls.items():
        b = library_function(callee, fn_file)
        if b and caller not in run and not server(caller):
            called[(b, callee)] += count
    if thunks:
        calls = through_thunks(calls, fn_file)
    hops = collections.Counter()  # (caller file, callee file) -> calls
    for (caller, callee), count in calls.items():
        a, b = library_function(caller, fn_file), library_function(callee, fn_file)
        if a and b and a != b and caller not in run:
            hops[(a, b)] += count
    return hops, called


def difference(base, walk):
    (bh, bc), (wh, wc) = base, walk
    hops = {k: wh.get(k, 0) - bh.get(k, 0) for k in set(wh) | set(bh)}
    hops = {k: v for k, v in hops.items() if abs(v) >= 0.005}
    files = sorted({file for (file, function), n in wc.items() if n > bc.get((file, function), 0)})
    return hops, files


# The engine's funnel: every event of a task is one pass through it (one lock section).
FUNNEL = re.compile(r"13EngineStorageC8withLock")


def engine_events(path):
    """Passes through the engine's funnel: calls into `EngineStorage.withLock` from outside it."""
    calls, _ = parse(path)
    return sum(n for (a, b), n in calls.items() if b and FUNNEL.search(b) and not (a and FUNNEL.search(a)))


def main():
    paths = sys.argv[1:]
    if len(paths) < 2:
        sys.exit(__doc__)
    runs = [figures(p) for p in paths]
    hops, files = difference(runs[0], runs[1])
    direct, _ = difference(figures(paths[0], thunks=False), figures(paths[1], thunks=False))
    folders = sorted({os.path.dirname(f) for f in files})
    negative = {k: v for k, v in hops.items() if v <= -0.5}
    print(f"hops (library calls across files): {round(sum(hops.values()))}")
    print(f"  of which through a thunk (witness, closure forwarder): {round(sum(hops.values()) - sum(direct.values()))}")
    print(f"distinct file pairs crossed: {sum(1 for v in hops.values() if v >= 0.5)}")
    print(f"files touched: {len(files)}")
    print(f"folders touched: {len(folders)}")
    events = engine_events(paths[1]) - engine_events(paths[0])
    if events > 0 and hops:
        (a, b), most = max(hops.items(), key=lambda kv: kv[1])
        print(f"engine events (passes through EngineStorage.withLock): {events}; the pair crossed most, "
              f"{os.path.basename(a)} -> {os.path.basename(b)}, {most:.0f} times: {most / events:.2f} per event")
    for i in range(2, len(runs)):
        more, more_files = difference(runs[i - 1], runs[i])
        print(f"check: walk {i} minus walk {i - 1}: hops {round(sum(more.values()))}, files {len(more_files)}")
    if negative:
        print(f"warning: {len(negative)} file pairs were crossed less often with the walk than without")
    print("\nfolders:")
    for d in folders:
        print(f"  {d}/ ({sum(1 for f in files if os.path.dirname(f) == d)} files)")
    print("\nfiles (calls into their functions during the walk):")
    for f in files:
        n = sum(c - runs[0][1].get(k, 0) for k, c in runs[1][1].items() if k[0] == f)
        print(f"  {f} ({n})")
    print("\nfile pairs crossed (caller file -> callee file: calls):")
    for (a, b), n in sorted(hops.items(), key=lambda kv: (-kv[1], kv[0])):
        print(f"  {n:6.0f}  {a} -> {b}")


if __name__ == "__main__":
    main()
