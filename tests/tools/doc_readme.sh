#!/bin/sh
# README.md's commands, run: every command of its shell code blocks (```sh, ```bash,
# ```console, and untagged blocks whose lines start with "$ ") runs in README order in
# one scratch folder laid out like the repository (build/ is the build under test, its
# tools first on PATH, HOME a folder of its own so ~/.local/share/ptplan/costs.db is
# the scratch's), and must exit as README says: 0, or the status of a marker. Markers
# are HTML comments on the lines before a block:
#   <!-- doctest: skip: REASON -->          the block's commands are not run
#   <!-- doctest: "TEXT" skip: REASON -->   its commands that hold TEXT are not run
#   <!-- doctest: exit S -->                its commands exit S ("TEXT" exit S: those)
# A marker whose TEXT no command of its block holds is an error, as is one that cannot
# be read or is not right before a shell block.
# Skips are listed with their reasons. Sizes are cut so the whole README runs in a few
# minutes; each cut is printed beside the command as written:
#   - ptrun's steps: --steps, --checkpoint-every and --stop-after divided by 25 (at least
#     2, 1, 1), and --steps 2 where none is given (the plans' default 50 / 25), so a
#     resumed run stands to its checkpoint as README's does; a step folder's number
#     (ck/step_00000100) is divided alike;
#   - ptprofile after the first: --quick --no-collectives --max-gflop 1 --max-mbs 1;
#   - ptcalib calibrating gets --force: a 2-step run on a busy machine is noisy, which
#     ptcalib refuses (README: "The load check");
#   - mpirun gets --oversubscribe (and --allow-run-as-root as root).
# scripts/setup.sh is a stub that builds nothing: the build under test is already built.
# Files README takes to be the reader's own are made here: corpus.txt (a text),
# my-cluster.json (examples/cluster-custom.json) and hosts (the two nodes it shows).
# README must hold no indented code block (the test could not see it) and no untagged
# block that starts with a command.
#   usage: doc_readme.sh BUILD_DIR SOURCE_DIR [--list]   (--list: print, run nothing)
set -u
list=0
[ "${3:-}" = --list ] && list=1
build=$(cd "$1" && pwd) || exit 1
src=$(cd "$2" && pwd) || exit 1
command -v python3 >/dev/null || { echo "FAIL: doc_readme reads README.md with python3"; exit 1; }
. "$src/tests/tools/cli_lib.sh"
start=$(date +%s)

work="$tmp/work"
mkdir -p "$work/scripts" "$tmp/home" "$tmp/cmds"
ln -s "$build" "$work/build"
for d in "$src"/*/; do
    d=${d%/}
    case "${d##*/}" in build* | scripts) ;; *) ln -s "$d" "$work/${d##*/}" ;; esac
done
for f in "$src"/scripts/*; do
    [ "${f##*/}" = setup.sh ] || ln -s "$f" "$work/scripts/${f##*/}"
done
cat >"$work/scripts/setup.sh" <<EOF
#!/bin/sh
[ \$# -eq 0 ] || { echo "doc_readme: scripts/setup.sh \$*: the doc test runs no other build; mark the block skipped" >&2; exit 1; }
echo "doc_readme: scripts/setup.sh builds nothing here: testing $build"
EOF
chmod +x "$work/scripts/setup.sh"
cp /usr/share/common-licenses/GPL-3 "$work/corpus.txt"
cp "$src/examples/cluster-custom.json" "$work/my-cluster.json"
printf 'node1 slots=8\nnode2 slots=8\n' >"$work/hosts"
export HOME="$tmp/home" PATH="$build:$PATH"
unset PT_COSTS_DB
root=0
[ "$(id -u)" = 0 ] && root=1

# The commands: cmds/N.sh each, cmds/list "N<TAB>LINE<TAB>WANT<TAB>SKIP", the
# rewrites in cmds/N.note; README's mistakes of form on stderr, exit 1.
python3 - "$src/README.md" "$tmp/cmds" "$root" <<'EOF' || { echo "FAIL: README.md cannot be read as the doc test needs (above)"; exit 1; }
import math, os, re, sys

readme, out, root = sys.argv[1], sys.argv[2], sys.argv[3] == "1"
lines = open(readme, encoding="utf-8").read().split("\n")
SHELL = {"sh", "bash", "shell", "console", "shell-session"}
COMMAND_START = re.compile(r"\s*(build/|scripts/|tools/|bench/|mpirun\s|srun\s|cmake\s|ctest\s)")
MARKER = re.compile(r"<!--\s*doctest:\s*(.*?)\s*-->$")
DIRECTIVE = re.compile(r'(?:"([^"]+)"\s+)?(?:skip:\s*(\S.*)|exit\s+(\d+))$')
problems, cmds = [], []

def block_commands(first, body):
    """(line, text) of each command of a shell block's body; first is the line of the
    body's first line. With "$ " prompts only those lines (and their continuations)."""
    prompt = any(l.startswith("$ ") for l in body)
    res, i = [], 0
    while i < len(body):
        l = body[i]
        if prompt:
            if not l.startswith("$ "):
                i += 1
                continue
            l = l[2:]
        elif not l.strip() or l.lstrip().startswith("#"):
            i += 1
            continue
        start, text = first + i, l
        while text.endswith("\\") and i + 1 < len(body):
            i += 1
            nxt = body[i][2:] if prompt and body[i].startswith("> ") else body[i]
            text = text[:-1].rstrip() + " " + nxt.strip()
        res.append((start, text))
        i += 1
    return res

def split_segments(text):
    """The command without its trailing comment, as simple commands and the operators
    between them: [seg, op, seg, ...]."""
    parts, cur, q, i = [], "", None, 0
    while i < len(text):
        c = text[i]
        if q:
            cur += c
            if c == q:
                q = None
        elif c in "'\"":
            q, cur = c, cur + c
        elif c == "#" and (not cur or cur[-1].isspace()):
            break
        elif text.startswith(("&&", "||"), i):
            parts += [cur, text[i:i + 2]]
            cur, i = "", i + 2
            continue
        elif c in ";|":
            parts += [cur, c]
            cur = ""
        else:
            cur += c
        i += 1
    return parts + [cur]

profiled = [False]

def rewrite(seg):
    words = seg.split()
    names = [os.path.basename(w) for w in words]
    def scale(s, opt, least):
        def f(m):
            v = max(least, math.ceil(int(m.group(2)) / 25))
            return m.group(1) + str(v)
        return re.sub(r"(%s[ =])(\d+)" % opt, f, s)
    if "mpirun" in names[:1] and "--oversubscribe" not in words:
        seg = re.sub(r"\bmpirun\b", "mpirun --oversubscribe" +
                     (" --allow-run-as-root" if root else ""), seg, count=1)
    # a checkpoint's step folder (DIR/step_00000100) holds the step scaled alike
    seg = re.sub(r"\bstep_(\d{8})\b",
                 lambda m: "step_%08d" % max(1, math.ceil(int(m.group(1)) / 25)), seg)
    if "ptrun" in names:
        new = scale(scale(scale(seg, "--steps", 2), "--checkpoint-every", 1), "--stop-after", 1)
        if "--steps" not in words:
            new = new.rstrip() + " --steps 2 "
        seg = new
    if "ptprofile" in names:
        if profiled[0]:
            extra = [w for w in ("--quick", "--no-collectives") if w not in words]
            seg = seg.rstrip() + " " + " ".join(extra + ["--max-gflop 1 --max-mbs 1"]) + " "
        profiled[0] = True
    if "ptcalib" in names and not {"--no-store", "--forget", "--force"} & set(words):
        seg = seg.rstrip() + " --force "
    return seg

def add_block(open_line, body, markers):
    found = block_commands(open_line + 1, body)
    want, skip = [0] * len(found), [""] * len(found)
    for mline, which, reason, status in markers:
        idx = [k for k, (_, text) in enumerate(found) if which is None or which in text]
        if not idx:
            problems.append("README.md:%d: the marker names \"%s\", which no command of the "
                            "block below holds" % (mline, which))
        for k in idx:
            if reason:
                skip[k] = reason
            else:
                want[k] = status
    for k, (line, text) in enumerate(found):
        parts = split_segments(text)
        plain = " ".join("".join(parts).split())
        run = " ".join("".join(p if j % 2 else rewrite(p) for j, p in enumerate(parts)).split())
        cmds.append((line, " ".join(text.split()), plain, run, want[k], skip[k]))

markers, last_text, prev_blank, i = [], "", True, 0
while i < len(lines):
    line = lines[i]
    fence = re.match(r"\s{0,3}(`{3,}|~{3,})\s*([^\s`]*)", line)
    if fence:
        mark = fence.group(1)
        j = i + 1
        while j < len(lines) and not re.match(r"\s{0,3}%s%s*\s*$" % (re.escape(mark), mark[0]),
                                              lines[j]):
            j += 1
        body, lang = lines[i + 1:j], fence.group(2).lower()
        prompt = any(l.startswith("$ ") for l in body)
        first = next((l for l in body if l.strip()), "")
        if lang in SHELL or (not lang and prompt):
            add_block(i + 1, body, markers)
        else:
            if not lang and COMMAND_START.match(first):
                problems.append("README.md:%d: an untagged code block that starts with a "
                                "command: tag it ```sh (commands) or ```text (output)" % (i + 1))
            for m in markers:
                problems.append("README.md:%d: a doctest marker before a block that is not "
                                "shell commands (line %d)" % (m[0], i + 1))
        markers, last_text, prev_blank, i = [], "", False, j + 1
        continue
    s = line.strip()
    m = MARKER.match(s)
    if m:
        d = DIRECTIVE.match(m.group(1))
        if not d:
            problems.append("README.md:%d: a doctest marker says %r; want 'skip: REASON' or "
                            "'exit S', for one command '\"TEXT\" skip: REASON'" % (i + 1, m.group(1)))
        else:
            markers.append((i + 1, d.group(1), d.group(2), int(d.group(3) or 0)))
    elif "doctest" in s and s.startswith("<!--"):
        problems.append("README.md:%d: a doctest marker that cannot be read: %s" % (i + 1, s))
    elif s:
        for mk in markers:
            problems.append("README.md:%d: a doctest marker not right before a code block"
                            % mk[0])
        markers = []
        if (line.startswith("    ") and prev_blank and last_text and
                not re.match(r"\s|[-*+] |\d+[.)] |\|", last_text)):
            problems.append("README.md:%d: an indented code block, which the doc test does "
                            "not run: write it as a fenced ```sh block" % (i + 1))
        last_text = line
    prev_blank = not s
    i += 1

for p in problems:
    print(p, file=sys.stderr)
with open(os.path.join(out, "list"), "w") as f:
    for n, (line, text, plain, run, want, skip) in enumerate(cmds, 1):
        open(os.path.join(out, "%d.sh" % n), "w").write(run + "\n")
        open(os.path.join(out, "%d.txt" % n), "w").write(text + "\n")
        if run != plain:
            open(os.path.join(out, "%d.cut" % n), "w").write(run + "\n")
        f.write("%d\t%d\t%d\t%s\n" % (n, line, want, skip))
sys.exit(1 if problems else 0)
EOF

ran=0 skipped=0
tab=$(printf '\t')
while IFS="$tab" read -r n line want skip; do
    text=$(cat "$tmp/cmds/$n.txt")
    if [ -n "$skip" ]; then
        echo "skip README.md:$line: $text"
        echo "     why: $skip"
        skipped=$((skipped + 1))
        continue
    fi
    cmd=$(cat "$tmp/cmds/$n.sh")
    echo "run  README.md:$line: $text"
    [ -f "$tmp/cmds/$n.cut" ] && echo "     as: $cmd"
    [ "$want" = 0 ] || echo "     README says it exits $want"
    [ "$list" = 1 ] && continue
    t0=$(date +%s)
    (cd "$work" && timeout 300 sh -c "$cmd" </dev/null >"$tmp/out" 2>"$tmp/err")
    got=$?
    echo "     exit $got in $(($(date +%s) - t0)) s"
    ran=$((ran + 1))
    if [ "$got" != "$want" ]; then
        fail "README.md:$line: exited $got, README says $want: $text"
        [ -f "$tmp/cmds/$n.cut" ] && echo "  run as: $cmd"
        echo "  stdout (last lines):"; tail -5 "$tmp/out" | sed 's/^/    /'
        echo "  stderr (last lines):"; tail -8 "$tmp/err" | sed 's/^/    /'
    fi
done <"$tmp/cmds/list"

echo "doc_readme: $ran commands run, $skipped skipped, $failures failed, in $(($(date +%s) - start)) s"
[ "$ran" -gt 0 ] || [ "$list" = 1 ] || fail "README.md has no command to run"
[ "$failures" = 0 ] && echo "doc_readme: all passed"
exit "$failures"
