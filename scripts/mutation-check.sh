#!/usr/bin/env bash
# Plants one bug at a time in TaskStateMachine, in the engine's lock sections (Engine, and the
# funnel in EngineStorage) and in the sharing of transfers (SharedTransfers), and checks that the randomized model
# (PipelineModelTests) catches each. Works on a scratch copy of the package, never on the
# working tree. Usage: [MUTANTS=<part of a name>] scripts/mutation-check.sh [seeds-per-scenario, default 400]
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
export SEEDS="${1:-400}"
export SCRATCH="${MUTATION_SCRATCH:-/tmp/urltaskmanager-mutants}"
# A copy of the package without its builds, made afresh (a file deleted since the last run must
# not linger); the archive keeps every file's time, so the scratch build stays incremental from
# one run to the next.
rm -rf "$SCRATCH/src"
mkdir -p "$SCRATCH/src"
(cd "$root" && git ls-files -co --exclude-standard -z | tar --null -T - -cf -) | (cd "$SCRATCH/src" && tar -xpf -)
exec python3 - <<'PY'
import os, re, subprocess, sys

scratch, seeds = os.environ["SCRATCH"], os.environ["SEEDS"]
machine = "Sources/URLTaskManager/Engine/TaskStateMachine.swift"
sharing = "Sources/URLTaskManager/Transport/Sharing/SharedTransfers.swift"
storage = "Sources/URLTaskManager/Engine/TaskRun.swift"
engine = "Sources/URLTaskManager/Engine/Engine.swift"
funnel = "Sources/URLTaskManager/Engine/EngineStorage.swift"

# (what the bug does, the machine's text, the mutant's text[, the file, TaskStateMachine by default])
mutations = [
    ("a cancelled held task stays in its batch",
     "            return .leaveBatch(index: index)\n",
     "            return .abandon(nil)\n"),
    ("a transfer that ends after its task did completes the task again",
     "            state = .completed(pendingTransfer: nil)\n            return .none\n        case .created, .gated, .intercepting, .held, .awaitingConnection, .reacting, .consultingChallenge:",
     "            state = .completed(pendingTransfer: nil)\n            return .complete(.finish, forwarded: false)\n        case .created, .gated, .intercepting, .held, .awaitingConnection, .reacting, .consultingChallenge:"),
    ("a requeue forgets that the reactor already sent the task again",
     "                budgets.requeuedBy[reactor] = true\n",
     "                budgets.requeuedBy[reactor] = false\n"),
    ("an interceptor's late answer is taken after the task ended",
     "        case .completed:\n            return false\n",
     "        case .completed:\n            return true\n"),
    ("the body of a followed redirect reaches the caller",
     "            case .redirecting:\n                break\n",
     "            case .redirecting:\n                return .forward(data)\n"),
    ("a late listener is not handed the answer's head",
     "                    replayed.append(.response(head))\n",
     "\n", sharing),
    ("the end of a shared transfer reaches all but its last listener",
     "        for subscription in listening { subscription.deliver(.complete(error)) }\n",
     "        for subscription in listening.dropLast() { subscription.deliver(.complete(error)) }\n", sharing),
    ("a listener separated by Vary is also handed the shared answer",
     "                    separated.append(subscription)\n",
     "                    separated.append(subscription)\n                    listening.append(subscription)\n", sharing),
    # The engine's lock sections: one section per event moves a task and the engine together.
    ("a task the gates hold goes on to its interceptors anyway",
     "        case .waitAtGate(let reactor):\n            return task.machine.waitingAtGate(reactor: reactor)\n",
     "        case .waitAtGate:\n            return task.machine.gateOpened()\n", engine),
    ("admission holds a task at a gate, but its machine is not told",
     "            return (.step(task.machine.admissionGated(reactor: reactor)), [])\n",
     "            return (.step(.waitAtGate(reactor: reactor)), [])\n", engine),
    ("a slot passed on by a task that may not go is not handed to the next",
     "            pending.append(contentsOf: passedOn)\n",
     "            _ = passedOn\n", engine),
    ("a run's end does not move the tasks held at its gate",
     "            decided.append(Decision(run: task.run, action: gateOpened(task, by: result)))\n",
     "            _ = gateOpened(task, by: result)\n", engine),
    ("a transfer's end hands its slot over, but the task that gets it is never told",
     "            admit(admission.transferEnded(id, answered: answered))\n",
     "            _ = admission.transferEnded(id, answered: answered)\n", engine),
    ("a reaction's section hands the slot over, but the task that gets it is never moved",
     "            id, reactor: index, alreadyRequeued: requeued, reported: reading, now: .now)\n        admit(handedOver)\n",
     "            id, reactor: index, alreadyRequeued: requeued, reported: reading, now: .now)\n        _ = handedOver\n", engine),
    ("the funnel drops what a section decided for other tasks",
     "        for decision in decided { runtime.async { decision.run.perform(decision.action) } }\n",
     "        _ = decided\n", funnel),
]

# MUTANTS="<text>|<text>" plants only the mutants whose name contains one of them (a quick check).
only = os.environ.get("MUTANTS", "")
mutations = [m for m in mutations if any(part in m[0] for part in only.split("|"))]
caught = 0
originals = {}
try:
    for name, old, new, *where in mutations:
        path = os.path.join(scratch, "src", where[0] if where else machine)
        original = originals.setdefault(path, open(path).read())
        if original.count(old) != 1:
            sys.exit(f"the text of '{name}' is not in its file exactly once")
        open(path, "w").write(original.replace(old, new))
        build = subprocess.run(["swift", "build", "--build-tests", "--build-path", f"{scratch}/.build"],
                               cwd=f"{scratch}/src", capture_output=True, text=True)
        if build.returncode != 0:
            sys.exit(f"the mutant '{name}' does not build:\n{build.stdout[-3000:]}{build.stderr[-3000:]}")
        test = subprocess.run(["swift", "test", "--skip-build", "--build-path", f"{scratch}/.build",
                               "--filter", "PipelineModelTests"], cwd=f"{scratch}/src",
                              capture_output=True, text=True, env={**os.environ, "MODEL_SEEDS": seeds})
        output = test.stdout + test.stderr
        if test.returncode == 0:
            open(path, "w").write(original)
            print(f"SURVIVED: {name}")
            continue
        caught += 1
        open(path, "w").write(original)
        found = re.search(r"seed \d+: [^\n]{0,110}|crashed exploring seed \d+|Fatal error: [^\n]{0,90}", output)
        print(f"caught: {name} ({found.group(0) if found else 'the test failed'})")
finally:
    for path, original in originals.items():
        open(path, "w").write(original)
print(f"{caught} of {len(mutations)} mutants caught with {seeds} seeds per scenario")
sys.exit(0 if caught == len(mutations) else 1)
PY
