#!/bin/sh
# The documents' commands, run: every command of the shell code blocks (```sh, ```bash,
# ```console, and untagged blocks whose lines start with "$ ") of README.md, then of the
# pages of docs/ and of CONTRIBUTING.md in the order DOCS gives below (docs/testing.md,
# "The documentation test", lists the same), in one scratch folder laid out like the
# repository (build/ is the build under test, its tools first on PATH, HOME a folder of
# its own so ~/.local/share/ptplan/costs.db is the scratch's; a later document sees what
# an earlier one made). Each must exit as its document says: 0, or the status of a
# marker. Markers are HTML comments on the lines before a block:
#   <!-- doctest: skip: REASON -->          the block's commands are not run
#   <!-- doctest: "TEXT" skip: REASON -->   its commands that hold TEXT are not run
#   <!-- doctest: exit S -->                its commands exit S ("TEXT" exit S: those)
# A marker whose TEXT no command of its block holds is an error, as is one that cannot
# be read or is not right before a shell block. Also errors: a page of docs/ that DOCS
# does not list (no page goes untested); a shell block in docs/results/, whose files are
# records of what was measured and are not run (records are ```text blocks); a relative
# link of these documents or of docs/results/ that names no file, or a #anchor that
# names no heading of its Markdown file.
# Skips are listed with their reasons. Sizes are cut so the documents run in a few
# minutes; each cut is printed beside the command as written:
#   - ptrun's steps: --steps, --checkpoint-every and --stop-after divided by 25 (at least
#     2, 1, 1), and --steps 2 where none is given (the plans' default 50 / 25), so a
#     resumed run stands to its checkpoint as the document's does; a step folder's
#     number (ck/step_00000100) is divided alike;
#   - ptprofile after the first: --quick --no-collectives --max-gflop 1 --max-mbs 1;
#   - ptcalib calibrating gets --force: a 2-step run on a busy machine is noisy, which
#     ptcalib refuses (docs/calibration.md: "The load check");
#   - mpirun gets --oversubscribe (and --allow-run-as-root as root).
# scripts/setup.sh is a stub that builds nothing: the build under test is already built.
# Files the documents take to be the reader's own are made here: corpus.txt (a text),
# my-cluster.json (examples/cluster-custom.json) and hosts (the two nodes it shows).
# A document must hold no indented code block (the test could not see it) and no
# untagged block that starts with a command.
#   usage: doc_readme.sh BUILD_DIR SOURCE_DIR [--list]   (--list: print, run nothing)
set -u
list=0
[ "${3:-}" = --list ] && list=1
build=$(cd "$1" && pwd) || exit 1
src=$(cd "$2" && pwd) || exit 1
command -v python3 >/dev/null || { echo "FAIL: doc_readme reads the documents with python3"; exit 1; }
. "$src/tests/tools/cli_lib.sh"
start=$(date +%s)
# The documents, in the order their commands run: a later one may use what an earlier
# one made (plan.json, ck/, the runs recorded in costs.db). A new page of docs/ goes here.
DOCS="README.md docs/ptplan.md docs/ptrun.md docs/calibration.md docs/gpu.md docs/testing.md CONTRIBUTING.md"

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

# The commands: cmds/N.sh each (cmds/N.txt as written, cmds/N.cut where cut), cmds/list
# "N<TAB>FILE:LINE<TAB>WANT<TAB>SKIP"; the documents' mistakes of form on stderr, exit 1.
# shellcheck disable=SC2086 # DOCS: one argument per document
python3 - "$src" "$tmp/cmds" "$root" $DOCS <<'EOF' || { echo "FAIL: the documents cannot be read as the doc test needs (above)"; exit 1; }
import glob, math, os, re, sys

src, out, root, docs = sys.argv[1], sys.argv[2], sys.argv[3] == "1", sys.argv[4:]
SHELL = {"sh", "bash", "shell", "console", "shell-session"}
COMMAND_START = re.compile(r"\s*(build/|scripts/|tools/|bench/|mpirun\s|srun\s|cmake\s|ctest\s)")
MARKER = re.compile(r"<!--\s*doctest:\s*(.*?)\s*-->$")
DIRECTIVE = re.compile(r'(?:"([^"]+)"\s+)?(?:skip:\s*(\S.*)|exit\s+(\d+))$')
FENCE = re.compile(r"\s{0,3}(`{3,}|~{3,})\s*([^\s`]*)")
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

def add_block(doc, open_line, body, markers):
    found = block_commands(open_line + 1, body)
    want, skip = [0] * len(found), [""] * len(found)
    for mline, which, reason, status in markers:
        idx = [k for k, (_, text) in enumerate(found) if which is None or which in text]
        if not idx:
            problems.append("%s:%d: the marker names \"%s\", which no command of the "
                            "block below holds" % (doc, mline, which))
        for k in idx:
            if reason:
                skip[k] = reason
            else:
                want[k] = status
    for k, (line, text) in enumerate(found):
        parts = split_segments(text)
        plain = " ".join("".join(parts).split())
        run = " ".join("".join(p if j % 2 else rewrite(p) for j, p in enumerate(parts)).split())
        cmds.append(("%s:%d" % (doc, line), " ".join(text.split()), plain, run, want[k], skip[k]))

def blocks(lines):
    """(index of the opening fence, index of the closing one, info string) of each fenced
    code block."""
    res, i = [], 0
    while i < len(lines):
        fence = FENCE.match(lines[i])
        if not fence:
            i += 1
            continue
        mark = fence.group(1)
        j = i + 1
        while j < len(lines) and not re.match(r"\s{0,3}%s%s*\s*$" % (re.escape(mark), mark[0]),
                                              lines[j]):
            j += 1
        res.append((i, j, fence.group(2).lower()))
        i = j + 1
    return res

def outside_blocks(lines):
    """The indices of the lines that are not in a fenced code block."""
    inside = set()
    for a, b, _ in blocks(lines):
        inside.update(range(a, b + 1))
    return [i for i in range(len(lines)) if i not in inside]

def anchors(path):
    """GitHub's anchors of a Markdown file's headings: lower case, punctuation other than
    '-' and '_' dropped, spaces as hyphens, a repeated one numbered."""
    lines = open(path, encoding="utf-8").read().split("\n")
    seen, res = {}, set()
    for i in outside_blocks(lines):
        h = re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", lines[i])
        if h:
            a = re.sub(r"[^\w\- ]", "", h.group(1).lower()).replace(" ", "-")
            n = seen.get(a, 0)
            seen[a] = n + 1
            res.add(a if n == 0 else "%s-%d" % (a, n))
    return res

def check_links(doc, lines):
    """Every relative link names a file that exists, and its #anchor a heading there."""
    for i in outside_blocks(lines):
        text = re.sub(r"(`+).*?\1", "", lines[i])    # not in code spans
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto:
                continue
            path, _, anchor = target.partition("#")
            full = os.path.normpath(os.path.join(src, os.path.dirname(doc), path or
                                                 os.path.basename(doc)))
            if not os.path.exists(full):
                problems.append("%s:%d: the link %s names no file" % (doc, i + 1, target))
            elif anchor and full.endswith(".md") and anchor not in anchors(full):
                problems.append("%s:%d: the link %s names no heading of %s"
                                % (doc, i + 1, target, os.path.relpath(full, src)))

def read_doc(doc, run):
    """Checks one document's form and links; run: its shell blocks' commands into cmds,
    else (a record) it may hold none."""
    lines = open(os.path.join(src, doc), encoding="utf-8").read().split("\n")
    check_links(doc, lines)
    markers, last_text, prev_blank, i = [], "", True, 0
    while i < len(lines):
        line = lines[i]
        fence = FENCE.match(line)
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
                if run:
                    add_block(doc, i + 1, body, markers)
                else:
                    problems.append("%s:%d: a shell block in a record of docs/results/, which "
                                    "the doc test does not run: tag it ```text" % (doc, i + 1))
            else:
                if not lang and COMMAND_START.match(first):
                    problems.append("%s:%d: an untagged code block that starts with a command: "
                                    "tag it ```sh (commands) or ```text (output)" % (doc, i + 1))
                for m in markers:
                    problems.append("%s:%d: a doctest marker before a block that is not "
                                    "shell commands (line %d)" % (doc, m[0], i + 1))
            markers, last_text, prev_blank, i = [], "", False, j + 1
            continue
        s = line.strip()
        m = MARKER.match(s)
        if m:
            d = DIRECTIVE.match(m.group(1))
            if not d:
                problems.append("%s:%d: a doctest marker says %r; want 'skip: REASON' or "
                                "'exit S', for one command '\"TEXT\" skip: REASON'"
                                % (doc, i + 1, m.group(1)))
            else:
                markers.append((i + 1, d.group(1), d.group(2), int(d.group(3) or 0)))
        elif "doctest" in s and s.startswith("<!--"):
            problems.append("%s:%d: a doctest marker that cannot be read: %s" % (doc, i + 1, s))
        elif s:
            for mk in markers:
                problems.append("%s:%d: a doctest marker not right before a code block"
                                % (doc, mk[0]))
            markers = []
            if (line.startswith("    ") and prev_blank and last_text and
                    not re.match(r"\s|[-*+] |\d+[.)] |\|", last_text)):
                problems.append("%s:%d: an indented code block, which the doc test does not "
                                "run: write it as a fenced ```sh block" % (doc, i + 1))
            last_text = line
        prev_blank = not s
        i += 1
    for mk in markers:
        problems.append("%s:%d: a doctest marker not right before a code block" % (doc, mk[0]))

for page in sorted(os.path.relpath(p, src) for p in glob.glob(os.path.join(src, "docs", "*.md"))):
    if page not in docs:
        problems.append("%s: a page of docs/ that the doc test does not run: add it to DOCS in "
                        "tests/tools/doc_readme.sh and to docs/testing.md's list" % page)
for doc in docs:
    if os.path.isfile(os.path.join(src, doc)):
        read_doc(doc, True)
    else:
        problems.append("%s: in DOCS, but there is no such file" % doc)
for rec in sorted(glob.glob(os.path.join(src, "docs", "results", "*.md"))):
    read_doc(os.path.relpath(rec, src), False)

for p in problems:
    print(p, file=sys.stderr)
with open(os.path.join(out, "list"), "w") as f:
    for n, (where, text, plain, run, want, skip) in enumerate(cmds, 1):
        open(os.path.join(out, "%d.sh" % n), "w").write(run + "\n")
        open(os.path.join(out, "%d.txt" % n), "w").write(text + "\n")
        if run != plain:
            open(os.path.join(out, "%d.cut" % n), "w").write(run + "\n")
        f.write("%d\t%s\t%d\t%s\n" % (n, where, want, skip))
sys.exit(1 if problems else 0)
EOF

ran=0 skipped=0
tab=$(printf '\t')
while IFS="$tab" read -r n where want skip; do
    text=$(cat "$tmp/cmds/$n.txt")
    if [ -n "$skip" ]; then
        echo "skip $where: $text"
        echo "     why: $skip"
        skipped=$((skipped + 1))
        continue
    fi
    cmd=$(cat "$tmp/cmds/$n.sh")
    echo "run  $where: $text"
    [ -f "$tmp/cmds/$n.cut" ] && echo "     as: $cmd"
    [ "$want" = 0 ] || echo "     the document says it exits $want"
    [ "$list" = 1 ] && continue
    t0=$(date +%s)
    (cd "$work" && timeout 300 sh -c "$cmd" </dev/null >"$tmp/out" 2>"$tmp/err")
    got=$?
    echo "     exit $got in $(($(date +%s) - t0)) s"
    ran=$((ran + 1))
    if [ "$got" != "$want" ]; then
        fail "$where: exited $got, the document says $want: $text"
        [ -f "$tmp/cmds/$n.cut" ] && echo "  run as: $cmd"
        echo "  stdout (last lines):"; tail -5 "$tmp/out" | sed 's/^/    /'
        echo "  stderr (last lines):"; tail -8 "$tmp/err" | sed 's/^/    /'
    fi
done <"$tmp/cmds/list"

echo "doc_readme: $ran commands run, $skipped skipped, $failures failed, in $(($(date +%s) - start)) s"
[ "$ran" -gt 0 ] || [ "$list" = 1 ] || fail "the documents have no command to run"
[ "$failures" = 0 ] && echo "doc_readme: all passed"
exit "$failures"
