# Sourced by setup.sh and setup_releases.sh: find_python X.Y [OVERRIDE_VALUE]
# Prints a Python X.Y interpreter: the override if given, else pythonX.Y/python3/python on PATH,
# else the newest pyenv X.Y install. Returns 1 when there is none.
find_python() {
  local want="$1" override="${2:-}"
  if [ -n "$override" ]; then echo "$override"; return 0; fi
  local major="${want%%.*}" minor="${want#*.}" cand v p
  for cand in "python$want" python3 python; do
    if command -v "$cand" >/dev/null 2>&1 && \
       "$cand" -c "import sys; sys.exit(sys.version_info[:2] != ($major, $minor))" 2>/dev/null; then
      command -v "$cand"; return 0
    fi
  done
  if command -v pyenv >/dev/null 2>&1; then
    for v in $(pyenv versions --bare 2>/dev/null | grep -E "^${major}\.${minor}(\.|$)" | sort -V -r); do
      p="$(pyenv root)/versions/$v/bin/python$want"
      if [ -x "$p" ]; then echo "$p"; return 0; fi
    done
  fi
  return 1
}
