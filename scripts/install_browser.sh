#!/usr/bin/env bash
# Install what tests/test_browser.py needs: Debian's chromium (/usr/bin/chromium) and Playwright for
# Python in the venv given as $1 (default .venv). Idempotent; prints what it did. It never fails
# the build: where something cannot be installed, the browser test skips with the reason (or,
# with CI=true, fails). Playwright drives the system chromium (`playwright install` downloads a
# browser, which this machine cannot do).
set -u
VENV=${1:-.venv}
PY="$VENV/bin/python"
CHROMIUM=/usr/bin/chromium

say() { echo "install_browser: $*"; }

# ---- chromium, from the system package manager ------------------------------------------------
if [ -x "$CHROMIUM" ]; then
  say "chromium present: $("$CHROMIUM" --version 2>/dev/null || echo "$CHROMIUM")"
elif ! command -v apt-get >/dev/null 2>&1; then
  say "WARNING: $CHROMIUM missing and no apt-get here; install chromium yourself" \
      "(the browser test will skip)"
else
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
      SUDO="sudo -n"
    else
      SUDO="none"
    fi
  fi
  if [ "$SUDO" = "none" ]; then
    say "WARNING: $CHROMIUM missing; apt-get needs root (or password-less sudo)" \
        "(the browser test will skip)"
  else
    say "installing Debian chromium with apt-get"
    export DEBIAN_FRONTEND=noninteractive
    if $SUDO apt-get install -y -q --no-install-recommends chromium >/dev/null 2>&1 \
       || { $SUDO apt-get update -q >/dev/null 2>&1 \
            && $SUDO apt-get install -y -q --no-install-recommends chromium >/dev/null 2>&1; }; then
      say "installed: $("$CHROMIUM" --version 2>/dev/null || echo chromium)"
    else
      say "WARNING: apt-get install chromium failed (the browser test will skip)"
    fi
  fi
fi

# ---- playwright, into the venv -------------------------------------------------------------------
pw_version() { "$PY" -m pip show playwright 2>/dev/null | sed -n 's/^Version: //p'; }
if [ ! -x "$PY" ]; then
  say "WARNING: no python at $PY; playwright not installed (the browser test will skip)"
elif "$PY" -c "import playwright" >/dev/null 2>&1; then
  say "playwright present in $VENV: $(pw_version)"
elif "$PY" -m pip install -q playwright >/dev/null 2>&1; then
  say "installed playwright into $VENV: $(pw_version)"
else
  say "WARNING: pip install playwright failed (the browser test will skip)"
fi
exit 0
