#!/usr/bin/env python3
"""Checks that src/ subsystems include each other only in the directions src/README.md allows.

Every `#include "<folder>/<name>.h"` (or `"<folder>/<sub>/<name>.h"`) of a file in src/<folder>/ or below it (or of a public header in
include/gpueval/, which belongs to the folder its .cpp lives in) must name a folder that its own
folder may call. Prints each violation as `file:line: <from> may not include <to> (<header>)` and
exits 1 if there is any; `--graph` prints the folder-level graph that the code has today.
"""
import os
import re
import sys

# Who may call whom; a folder may always include itself and common/. A public header belongs to the
# folder of its .cpp (a header-only one to common).
ALLOWED = {
    'common': set(),
    'jinja': set(),
    'tokenizer': set(),
    'sandbox': set(),
    'model': {'tokenizer'},
    'tasks': {'plan', 'jinja'},
    'plan': {'tokenizer', 'model'},
    'aggregate': {'tasks', 'plan'},
    'store': {'plan', 'tasks'},
    'report': {'tasks', 'plan', 'aggregate', 'store'},
    'run': {'model', 'tokenizer', 'plan', 'sandbox'},
    'evaluation': {'model', 'tokenizer', 'tasks', 'plan', 'run', 'aggregate', 'store', 'report', 'sandbox', 'jinja'},
    'cluster': {'model', 'tokenizer', 'tasks', 'plan', 'run', 'aggregate', 'store', 'report', 'evaluation', 'sandbox',
                'jinja'},
    'cli': {'model', 'tokenizer', 'tasks', 'plan', 'run', 'aggregate', 'store', 'report', 'evaluation', 'cluster',
            'sandbox', 'jinja'},
}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')


def folder_files(top):
    """Every file below a subsystem's folder (its subfolders too: model/decoder/, ...), sorted."""
    out = []
    for dirpath, dirnames, filenames in os.walk(top):
        dirnames.sort()
        out.extend(os.path.join(dirpath, f) for f in sorted(filenames))
    return out


def main():
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..')
    src = os.path.join(root, 'src')
    public_home = {}  # public header name -> the folder that implements it
    files = []
    for folder in ALLOWED:
        for f in folder_files(os.path.join(src, folder)):
            if f.endswith('.cpp'):
                public_home[os.path.basename(f)[:-4] + '.h'] = folder
            if f.endswith(('.h', '.cpp')):
                files.append((folder, f))
    inc_dir = os.path.join(root, 'include', 'gpueval')
    for f in sorted(os.listdir(inc_dir)):
        public_home.setdefault(f, 'common')  # header-only (error.h): the base layer
        files.append((public_home[f], os.path.join(inc_dir, f)))
    graph, bad = {}, []
    for folder, path in files:
        with open(path) as fh:
            for n, line in enumerate(fh, 1):
                m = INCLUDE.match(line)
                if not m:
                    continue
                header = m.group(1)
                if header.startswith('gpueval/'):
                    name = header[len('gpueval/'):]
                    if name == 'gpueval_kernels.h':
                        continue
                    if path.startswith(inc_dir) is False and name not in public_home:
                        continue
                    target = public_home.get(name)
                    if target is None:
                        continue
                elif '/' in header and header.split('/')[0] in ALLOWED:
                    target = header.split('/')[0]
                    if path.startswith(inc_dir):
                        bad.append(f'{os.path.relpath(path, root)}:{n}: a public header includes the internal {header}')
                        continue
                else:
                    continue
                if target == folder:
                    continue
                graph.setdefault(folder, set()).add(target)
                if target != 'common' and target not in ALLOWED[folder]:
                    bad.append(f'{os.path.relpath(path, root)}:{n}: {folder} may not include {target} ({header})')
    if '--graph' in sys.argv:
        for folder in ALLOWED:
            print(f'{folder}: {" ".join(sorted(graph.get(folder, [])))}')
    for b in bad:
        print(b)
    return 1 if bad else 0


if __name__ == '__main__':
    sys.exit(main())
