"""Where a change's symbolic links lead, judged physically: each link of a tree is followed as the kernel
follows it once the tree is checked out (`orch apply`, a reviewer's checkout, the checks' copy), through the
tree's other links (a chain, a link to a folder, `..` after a link: `..` goes up from where a link led, not
from how its path is spelled). A link that ends outside the tree, passes through a `.git`, or never ends (a
loop) is refused. Each link's own text looking inside proves nothing: `a -> sub/up/..` with `sub/up -> ..`
reads inside and leads out.

Judged on git trees of the run's repository (`problems`): a change's tree when it is taken, an integrated
tree in the queue, the branch `orch apply` fetches. Only what a tree adds is refused: a link of the base that
already led out (a user's own link to `/etc/...`) is the user's, not the change's.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping

from orch.lead.changes.gitcmd import git
from orch.lead.changes.repo import RunRepo

MAX_HOPS = 40
"""Links followed for one path before it counts as a loop (the kernel's MAXSYMLINKS)."""
LINK_MODE = b"120000"


def is_git_dir(name: str) -> bool:
    """Whether a path component is a git directory on some file system a checkout may land on: `.git` in any
    case (case-insensitive file systems), with trailing dots or spaces (Windows drops them), `git~1` (its short
    name)."""
    folded = name.casefold().rstrip(". ")
    return folded in (".git", "git~1")


def follow(links: Mapping[str, str], path: str) -> str | None:
    """Why the link at `path` (a tree path, `/`-separated; `links` maps every link of the tree to its text)
    does not stay in the tree, or None when it does."""
    folder = path.split("/")[:-1]
    pending = deque(links[path].split("/"))
    hops, shown = 1, repr(links[path])  # quoted: control characters escaped
    if links[path].startswith("/"):
        return f"an absolute link (-> {shown})"
    while pending:
        name = pending.popleft()
        if name in ("", "."):
            continue
        if name == "..":
            if not folder:
                return f"a link out of the tree (-> {shown})"
            folder.pop()
            continue
        if is_git_dir(name):
            return f"a link into git metadata (-> {shown})"
        target = links.get("/".join([*folder, name]))
        if target is None:
            folder.append(name)  # a folder, a file or nothing: the kernel goes on (or stops) inside the tree
            continue
        hops += 1
        if hops > MAX_HOPS:
            return f"a chain of links that never ends (-> {shown})"
        if target.startswith("/"):
            return f"a link out of the tree through {'/'.join([*folder, name])!r} (-> {shown})"
        pending.extendleft(reversed(target.split("/")))
    return None


def judge(links: Mapping[str, str]) -> dict[str, str]:
    """Each link of a tree that does not stay in it, with why."""
    found = {}
    for path in sorted(links):
        why = follow(links, path)
        if why is not None:
            found[path] = why
    return found


def tree_links(repo: RunRepo, tree: str) -> dict[str, str]:
    """Every symbolic link of a git tree (or commit) of the run's repository: its path and its text."""
    listing = git(repo.git_dir, "ls-tree", "-r", "-z", "--full-tree", tree).stdout
    shas: dict[str, str] = {}
    for record in listing.split(b"\0"):
        meta, _, name = record.partition(b"\t")
        if meta.startswith(LINK_MODE + b" "):
            shas[name.decode(errors="surrogateescape")] = meta.split()[2].decode()
    if not shas:
        return {}
    batch = git(repo.git_dir, "cat-file", "--batch", input="".join(f"{s}\n" for s in shas.values()).encode()).stdout
    texts, at = {}, 0
    for sha in shas.values():  # each answer: "<sha> blob <size>\n<bytes>\n", in the order asked
        header_end = batch.index(b"\n", at)
        size = int(batch[at:header_end].split()[2])
        texts[sha] = batch[header_end + 1 : header_end + 1 + size].decode(errors="surrogateescape")
        at = header_end + 1 + size + 1
    return {path: texts[sha] for path, sha in shas.items()}


def problems(repo: RunRepo, tree: str, base: str) -> list[str]:
    """The links of `tree` that lead out of it, into a `.git` or round in a loop, and did not already in `base`
    (the same link, the same text, the same problem): one line each, `path: why`."""
    now = tree_links(repo, tree)
    found = judge(now)
    if not found:
        return []
    before = tree_links(repo, base)
    old = judge(before)
    return [
        f"{path}: {why}" for path, why in found.items() if not (old.get(path) == why and before.get(path) == now[path])
    ]
