#!/bin/sh
# The commits since TAG, one line each, oldest first.
set -eu
git log --reverse --format='%h %s' "${1:?usage: changes.sh TAG}..HEAD"
