#!/usr/bin/env bash
# Installs what `make clients` (cmd/trellis-clients) needs besides Go and the
# PostgreSQL server (scripts/ensure-postgres.sh): a JDK and Debian's pgJDBC,
# Debian's psycopg 3, Node.js with npm, the npm packages pinned in
# scripts/clients/node/package-lock.json, and the Go module sources of the pgx
# and lib/pq suites. As root on Debian/Ubuntu it uses apt-get; otherwise it
# says what to install. It never installs postgresql-* packages: that could
# upgrade the server the other tests run on.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"

missing=()
command -v javac >/dev/null 2>&1 || missing+=(default-jdk-headless)
[ -f /usr/share/java/postgresql.jar ] || missing+=(libpostgresql-jdbc-java)
# Debian's python3-psycopg is importable by /usr/bin/python3 only, which is
# the interpreter the runner uses whatever python3 is first on PATH.
/usr/bin/python3 -c 'import psycopg' >/dev/null 2>&1 || missing+=(python3-psycopg)
command -v node >/dev/null 2>&1 || missing+=(nodejs)
command -v npm >/dev/null 2>&1 || missing+=(npm)

if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "installing ${missing[*]} with apt-get" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >/dev/null
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  else
    echo "error: missing ${missing[*]}: install them (e.g. 'sudo apt-get install ${missing[*]}') and re-run" >&2
    exit 1
  fi
fi

# node-postgres and postgres.js, exactly as locked, into the project-local
# scripts/clients/node/node_modules (ignored by git).
if [ ! -d "$here/node/node_modules/pg" ] || [ ! -d "$here/node/node_modules/postgres" ] ||
   [ "$here/node/package-lock.json" -nt "$here/node/node_modules/.package-lock.json" ]; then
  (cd "$here/node" && npm ci --no-audit --no-fund --loglevel=error)
fi

# The Go suites' sources, through the module proxy (the runner copies them
# out of the read-only module cache).
cd "$repo"
go mod download github.com/jackc/pgx/v5
(cd "$(mktemp -d)" && go mod download github.com/lib/pq@latest && rmdir "$PWD")
