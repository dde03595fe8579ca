#!/usr/bin/env bash
# Makes a PostgreSQL server answer at 127.0.0.1:5432 (user postgres, trust auth, database test),
# installing and starting one from Debian's packages when the machine has none running. Prints the
# DSN for EDGEPLANE_TEST_POSTGRES on stdout; everything else goes to stderr.
set -euo pipefail
DSN=postgres://postgres@127.0.0.1:5432/test
log() { echo "postgres.sh: $*" >&2; }

ready() { pg_isready -h 127.0.0.1 -p 5432 -q 2>/dev/null; }

if ! command -v pg_isready >/dev/null 2>&1 || ! ready; then
  if ! ls /etc/postgresql/*/main >/dev/null 2>&1; then
    log "no PostgreSQL cluster: installing Debian's postgresql"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >&2
    apt-get install -y -qq postgresql >&2
  fi
  version=$(ls /etc/postgresql | sort -V | tail -1)
  hba=/etc/postgresql/$version/main/pg_hba.conf
  if ! grep -q '^host all all 127.0.0.1/32 trust' "$hba"; then
    log "allowing trust auth on 127.0.0.1 for the tests"
    sed -i '1i host all all 127.0.0.1/32 trust' "$hba"
  fi
  conf=/etc/postgresql/$version/main/postgresql.conf
  grep -q "^listen_addresses" "$conf" || echo "listen_addresses = '127.0.0.1'" >> "$conf"
  log "starting cluster $version/main"
  pg_ctlcluster --skip-systemctl-redirect "$version" main start >&2 || pg_ctlcluster --skip-systemctl-redirect "$version" main reload >&2 || true
  for _ in $(seq 1 60); do ready && break; sleep 0.5; done
  ready || { log "PostgreSQL did not become ready"; exit 1; }
fi

if ! psql "$DSN" -Atqc 'SELECT 1' >/dev/null 2>&1; then
  log "creating database test"
  psql postgres://postgres@127.0.0.1:5432/postgres -qc 'CREATE DATABASE test' >&2
fi
psql "$DSN" -Atqc 'SELECT 1' >/dev/null
echo "$DSN"
