#!/usr/bin/env bash
# Makes sure PostgreSQL 15+ server binaries (initdb, postgres) are present.
# As root on Debian/Ubuntu they are installed with apt-get; otherwise we say
# what to install and fail. Extra Debian packages to install may be passed as
# arguments (e.g. pgbouncer for the benchmarks).
set -euo pipefail

have_server() {
  command -v initdb >/dev/null 2>&1 && return 0
  ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 && return 0
  ls /usr/pgsql-*/bin/initdb >/dev/null 2>&1 && return 0
  return 1
}

missing=()
have_server || missing+=(postgresql postgresql-contrib)
command -v psql >/dev/null 2>&1 || missing+=(postgresql-client)
for extra in "$@"; do
  command -v "$extra" >/dev/null 2>&1 || missing+=("$extra")
done
[ ${#missing[@]} -eq 0 ] && exit 0

if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "installing ${missing[*]} with apt-get" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  # Debian's package starts a cluster of its own; we never use it.
  if command -v pg_lsclusters >/dev/null 2>&1; then
    pg_lsclusters -h 2>/dev/null | while read -r ver name _; do
      pg_ctlcluster "$ver" "$name" stop >/dev/null 2>&1 || true
    done
  fi
  exit 0
fi
echo "error: missing ${missing[*]}: install the PostgreSQL 15+ server package (e.g. 'sudo apt-get install postgresql') and re-run" >&2
exit 1
