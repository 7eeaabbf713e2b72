# Sourced by setup.sh and python_tests.sh. install_debian_packages PKG... installs Debian
# packages with apt-get (through sudo when not root) and returns non-zero, having said why,
# when it cannot: no apt-get, no permission, or no package index (an offline machine).
install_debian_packages() {
  echo "installing Debian packages: $*"
  if ! command -v apt-get >/dev/null; then
    echo "cannot install $*: apt-get not found (not a Debian machine)"
    return 1
  fi
  local sudo_cmd=()
  if [ "$(id -u)" -ne 0 ]; then
    if ! command -v sudo >/dev/null; then
      echo "cannot install $*: not root and sudo not found"
      return 1
    fi
    sudo_cmd=(sudo)
  fi
  if ! "${sudo_cmd[@]}" apt-get update -qq; then
    echo "cannot install $*: no package index (apt-get update failed; offline?)"
    return 1
  fi
  if ! "${sudo_cmd[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@"; then
    echo "cannot install $*: apt-get install failed (no package index reachable, or the" \
         "packages are not in it)"
    return 1
  fi
}
