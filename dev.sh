#!/usr/bin/env bash
# dev.sh: build and run the Affido platform on this machine.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")"
export GOTOOLCHAIN=local

# Stack settings; verify.sh runs a second stack beside the dev one by
# overriding these. Every variable is listed in docs/operations.md.
export AFFIDO_STACK=${AFFIDO_STACK:-affido}
export AFFIDO_PORT=${AFFIDO_PORT:-18080}
export AFFIDO_CONTROL_SUBNET=${AFFIDO_CONTROL_SUBNET:-10.212.0.0/24}
export AFFIDO_CADDY_IP=${AFFIDO_CADDY_IP:-10.212.0.10}
export AFFIDO_SANDBOX_POOL=${AFFIDO_SANDBOX_POOL:-10.213.0.0/16}
export AFFIDO_PROVIDER=${AFFIDO_PROVIDER:-fake}

BUILD=.build
DEV_USER=dev-user
DEV_TOKEN=dev-token
DEV_PASSWORD=dev-password # the web client's sign-in, dev only
IMAGES=(affido/agent:dev affido/manager:dev affido/caddy:dev affido/browser:dev affido/chromium:bookworm affido/postgres:15 affido/debian:bookworm affido/probe:test)

usage() {
  cat <<EOF
Usage: ./dev.sh COMMAND [options]

Commands:
  up [--provider fake|openrouter]  build, start the control plane, wait until healthy, seed dev-user
  build                            build the binaries and images (no start)
  prepare                          what compose cannot do (binaries, Debian base, build contexts, .env);
                                   then docker compose up -d --build builds the images and starts the stack
  reload                           rebuild, restart the control plane, recreate sandboxes; keeps all data
  status                           control plane, sandboxes with their state, volumes
  logs [SERVICE]                   follow the control plane's logs
  token USER                       print a new API token for USER (creates the user)
  bench [FLAGS]                    measure the running stack against its floors (affido bench --help),
                                   then the durable runtime (go test -bench ./agent/durable/)
  backup [DIR] [--keep N]          pg_dump of Postgres and every user's archive into DIR (default
                                   backups/STACK-TIME); --keep N removes all but the newest N under backups/
  down                             stop the control plane; sandbox containers and all data stay
  reset [-y] [--keep-images]       remove every Affido container, network, volume and image (asks unless -y)
  help                             this text

Stack: $AFFIDO_STACK on http://127.0.0.1:$AFFIDO_PORT (AFFIDO_STACK, AFFIDO_PORT to change).
EOF
}

die() { echo "dev.sh: $*" >&2; exit 1; }
say() { echo "==> $*" >&2; }

# control_key exports the stack's control key: the one credential Caddy's
# sandbox-control listener answers (caddy/controlkey). It is made at the
# stack's first start and kept in .secrets/STACK/control.key, given to the
# manager and Caddy only, never to a sandbox.
control_key() {
  [[ -n "${AFFIDO_CONTROL_KEY:-}" ]] && return 0
  local dir=.secrets/$AFFIDO_STACK
  if [[ ! -s $dir/control.key ]]; then
    (umask 077 && mkdir -p "$dir" && od -An -tx1 -N32 /dev/urandom | tr -d ' \n' > "$dir/control.key")
  fi
  AFFIDO_CONTROL_KEY=$(<"$dir/control.key")
  export AFFIDO_CONTROL_KEY
}

# postgres_password exports the stack's database password, made at its
# first start and kept in .secrets/STACK/postgres.password. A stack whose
# database predates it keeps the old default, which its data was made with.
postgres_password() {
  [[ -n "${AFFIDO_POSTGRES_PASSWORD:-}" ]] && return 0
  local dir=.secrets/$AFFIDO_STACK
  if [[ ! -s $dir/postgres.password ]]; then
    if docker volume inspect "${AFFIDO_STACK}_oltp" >/dev/null 2>&1; then
      (umask 077 && mkdir -p "$dir" && printf affido > "$dir/postgres.password")
    else
      (umask 077 && mkdir -p "$dir" && od -An -tx1 -N24 /dev/urandom | tr -d ' \n' > "$dir/postgres.password")
    fi
  fi
  AFFIDO_POSTGRES_PASSWORD=$(<"$dir/postgres.password")
  export AFFIDO_POSTGRES_PASSWORD
}

# compose runs docker compose or docker-compose, whichever exists.
compose() {
  control_key
  postgres_password
  # The manager runs as its own uid with the Docker socket's group added.
  AFFIDO_DOCKER_GID=$(stat -L -c %g /var/run/docker.sock 2>/dev/null || echo 0)
  export AFFIDO_DOCKER_GID
  if docker compose version >/dev/null 2>&1; then
    docker compose -p "$AFFIDO_STACK" -f compose.yaml "$@"
  elif command -v docker-compose >/dev/null 2>&1; then
    docker-compose -p "$AFFIDO_STACK" -f compose.yaml "$@"
  else
    die "neither 'docker compose' nor 'docker-compose' is installed (Debian: apt-get install docker-compose)"
  fi
}

# check_prereqs checks everything the build needs before anything is built.
# As root it installs what is missing (scripts/prereqs.sh, the same code
# .ci/run uses); otherwise it names the one command to run and stops.
check_prereqs() {
  command -v go >/dev/null 2>&1 || die "Go is not installed or not on PATH (need Go 1.26)"
  scripts/prereqs.sh check 2>/dev/null && return 0
  if [[ $(id -u) -eq 0 ]]; then
    say "installing missing prerequisites (scripts/prereqs.sh install)"
    scripts/prereqs.sh install || die "installing the prerequisites failed (output above)"
    return 0
  fi
  scripts/prereqs.sh check || true
  die "run this once, then ./dev.sh up again:  sudo $PWD/scripts/prereqs.sh install"
}


# docker_build TAG DIR builds with the classic builder, quietly unless it fails.
docker_build() {
  local out
  if ! out=$(docker build -q -t "$1" "${@:3}" "$2" 2>&1); then
    echo "$out" >&2
    die "building image $1 failed"
  fi
}

build_binaries() {
  say "building binaries"
  mkdir -p "$BUILD/bin"
  CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o "$BUILD/bin/" ./cmd/affido ./cmd/affido-agent ./cmd/affido-caddy ./cmd/affido-browser
}

# build_debian_base builds the Debian base every other image starts from,
# once (debootstrap from Debian's mirror, then docker import).
build_debian_base() {
  if ! docker image inspect affido/debian:bookworm >/dev/null 2>&1; then
    say "building affido/debian:bookworm with debootstrap (about 30 s)"
    images/debian/build.sh affido/debian:bookworm
  fi
}

# build_base_images builds the Debian base once and Postgres whenever its
# files change (the image is labelled with their hash); no registry is
# needed (debootstrap from Debian's mirror, then docker import).
build_base_images() {
  local src
  src=$(cat images/postgres/* | sha256sum | cut -c1-16)
  if [[ $(docker image inspect -f '{{index .Config.Labels "affido.src"}}' affido/postgres:15 2>/dev/null) == "$src" ]]; then
    return
  fi
  build_debian_base
  say "building affido/postgres:15 from Debian's postgresql package"
  docker_build affido/postgres:15 images/postgres --label "affido.src=$src"
}

# build_chromium_base builds Debian's Chromium on the Debian base whenever
# its Dockerfile changes: the base of the users' browser sandboxes.
build_chromium_base() {
  local src
  src=$(sha256sum <images/chromium/Dockerfile | cut -c1-16)
  if [[ $(docker image inspect -f '{{index .Config.Labels "affido.src"}}' affido/chromium:bookworm 2>/dev/null) == "$src" ]]; then
    return
  fi
  build_debian_base
  say "building affido/chromium:bookworm from Debian's chromium package (a minute or two)"
  docker_build affido/chromium:bookworm images/chromium --label "affido.src=$src"
}

# build_busybox builds the agent's busybox from Debian's source with only the
# listed applets, once per change of the list or the script.
build_busybox() {
  local key
  key=$(cat images/agent/applets images/agent/busybox.sh | sha256sum | cut -c1-16)
  if [[ -x "$BUILD/busybox/busybox-$key" ]]; then
    return
  fi
  say "building the agent's minimal busybox from Debian's source (about 20 s)"
  mkdir -p "$BUILD/busybox"
  images/agent/busybox.sh "$BUILD/busybox/busybox-$key.tmp"
  mv "$BUILD/busybox/busybox-$key.tmp" "$BUILD/busybox/busybox-$key"
}

build_agent_context() {
  local ctx=$BUILD/agent key
  build_busybox
  key=$(cat images/agent/applets images/agent/busybox.sh | sha256sum | cut -c1-16)
  rm -rf "$ctx"
  mkdir -p "$ctx/root/bin" "$ctx/root/etc" "$ctx/root/tmp" "$ctx/owned/data" "$ctx/owned/workspace"
  cp "$BUILD/busybox/busybox-$key" "$ctx/root/bin/busybox"
  while read -r applet; do
    [[ -z "$applet" || "$applet" == \#* ]] && continue
    ln -s busybox "$ctx/root/bin/$applet"
  done < images/agent/applets
  cp "$BUILD/bin/affido-agent" "$ctx/root/bin/affido-agent"
  # Two identities (agent/privsep): the agent owns /data; the tools share
  # /workspace with it through the group "work".
  printf 'root:x:0:0:root:/:/bin/false\nagent:x:10001:10001:agent:/workspace:/bin/false\ntools:x:10002:10002:tools:/workspace:/bin/sh\n' > "$ctx/root/etc/passwd"
  printf 'root:x:0:\nagent:x:10001:\ntools:x:10002:\nwork:x:10003:agent,tools\n' > "$ctx/root/etc/group"
  chmod 0700 "$ctx/owned/data"
  chmod 2770 "$ctx/owned/workspace"
  cp Dockerfile.agent "$ctx/Dockerfile"
}

# build_contexts prepares the directories the images are built from, the
# same ones compose.yaml's build sections name.
build_contexts() {
  build_agent_context
  local m=$BUILD/manager c=$BUILD/caddy
  rm -rf "$m" "$c"
  mkdir -p "$m" "$c"
  cp images/manager/Dockerfile "$BUILD/bin/affido" "$m/"
  mkdir -p "$m/run/affido"
  chmod 700 "$m/run/affido"
  "$BUILD/bin/affido" marketplace build --src marketplace/skills --out "$m/marketplace" >/dev/null
  if [[ -f /etc/ssl/certs/ca-certificates.crt ]]; then
    cp /etc/ssl/certs/ca-certificates.crt "$m/"
  else
    : > "$m/ca-certificates.crt"
  fi
  cp images/caddy/Dockerfile caddy/Caddyfile "$BUILD/bin/affido-caddy" "$c/"
  rm -rf "$BUILD/browser"
  mkdir -p "$BUILD/browser"
  cp images/browser/Dockerfile "$BUILD/bin/affido-browser" "$BUILD/browser/"
}

build_images() {
  build_base_images
  build_chromium_base
  say "building affido/agent:dev, affido/manager:dev, affido/caddy:dev, affido/browser:dev"
  build_contexts
  docker_build affido/agent:dev "$BUILD/agent"
  docker_build affido/manager:dev "$BUILD/manager"
  docker_build affido/caddy:dev "$BUILD/caddy"
  docker_build affido/browser:dev "$BUILD/browser"
}

# write_compose_env writes what compose alone needs to run this stack into
# AFFIDO_COMPOSE_ENV (default .env, which docker compose and docker-compose
# read by themselves): the project name, the stack's settings and its keys,
# readable by its owner only. dev.sh exports every one of these itself, so
# the file never changes what dev.sh runs.
write_compose_env() {
  local file=${AFFIDO_COMPOSE_ENV:-.env}
  control_key
  postgres_password
  AFFIDO_DOCKER_GID=$(stat -L -c %g /var/run/docker.sock 2>/dev/null || echo 0)
  mkdir -p "$(dirname "$file")"
  (umask 077 && cat >"$file.tmp" <<EOF
# Written by ./dev.sh for the stack $AFFIDO_STACK; then: docker compose up -d --build
COMPOSE_PROJECT_NAME=$AFFIDO_STACK
AFFIDO_STACK=$AFFIDO_STACK
AFFIDO_PORT=$AFFIDO_PORT
AFFIDO_CONTROL_SUBNET=$AFFIDO_CONTROL_SUBNET
AFFIDO_CADDY_IP=$AFFIDO_CADDY_IP
AFFIDO_SANDBOX_POOL=$AFFIDO_SANDBOX_POOL
AFFIDO_PROVIDER=$AFFIDO_PROVIDER
AFFIDO_CONTROL_KEY=$AFFIDO_CONTROL_KEY
AFFIDO_POSTGRES_PASSWORD=$AFFIDO_POSTGRES_PASSWORD
AFFIDO_DOCKER_GID=$AFFIDO_DOCKER_GID
EOF
  )
  mv "$file.tmp" "$file"
}

# cmd_prepare does what compose cannot: the Go binaries, the Debian base
# (debootstrap), the build contexts, the browser sandboxes' image, the
# stack's keys in .env. Then
# `docker compose up -d --build` builds every image and starts the stack.
cmd_prepare() {
  check_prereqs
  build_lock
  build_binaries
  build_debian_base
  build_contexts
  # The browser sandboxes' image is the manager's to run, not a service's:
  # compose cannot build it.
  build_chromium_base
  docker_build affido/browser:dev "$BUILD/browser"
  write_compose_env
  build_unlock
  say "prepared; now: docker compose up -d --build   (or: docker-compose up -d --build)"
}

# build_lock and build_unlock bracket a build: two stacks on one machine
# (the e2e suite runs two) share the binaries, the build contexts and the
# affido/*:dev tags, so one build at a time.
build_lock() {
  mkdir -p "$BUILD"
  exec {BUILD_LOCK_FD}>"$BUILD/.lock"
  flock "$BUILD_LOCK_FD"
}
build_unlock() { exec {BUILD_LOCK_FD}>&-; }

cmd_build() {
  check_prereqs
  build_lock
  build_binaries
  build_images
  write_compose_env
  build_unlock
}

manager_id() { compose ps -q sandbox-manager; }

# admin runs `affido admin ...` inside the manager container, where the admin
# API listens on a unix socket (never TCP).
admin() {
  local id
  id=$(manager_id)
  [[ -n "$id" ]] || die "the control plane is not running (./dev.sh up)"
  docker exec "$id" /bin/affido admin "$@"
}

wait_healthy() {
  say "waiting for the control plane"
  local id i
  for i in $(seq 1 120); do
    id=$(manager_id || true)
    if [[ -n "$id" ]] && docker exec "$id" /bin/affido manager healthcheck >/dev/null 2>&1 \
      && curl -fsS -o /dev/null "http://127.0.0.1:$AFFIDO_PORT/app/" 2>/dev/null; then
      return 0
    fi
    sleep 0.5
  done
  compose logs --tail 50 >&2 || true
  die "the control plane did not become healthy within 60 s (logs above)"
}

# The dev session, exactly the SQL docs/api.md shows (only the token's
# sha256 is stored).
DEV_SQL="INSERT INTO users (id) VALUES ('$DEV_USER') ON CONFLICT DO NOTHING;
INSERT INTO session (token_hash, user_id, expires_at) VALUES (sha256(convert_to('$DEV_TOKEN', 'UTF8')), '$DEV_USER', now() + interval '30 days')
  ON CONFLICT (token_hash) DO UPDATE SET expires_at = EXCLUDED.expires_at;"

seed_dev_session() {
  # The password first: setting one ends the user's sessions.
  printf '%s\n' "$DEV_PASSWORD" | docker exec -i "$(manager_id)" /bin/affido admin password "$DEV_USER" >/dev/null
  docker exec -i "$(compose ps -q oltp)" psql -q -U affido -d affido -v ON_ERROR_STOP=1 -c "$DEV_SQL" >/dev/null
}

port_free_or_ours() {
  if (exec 3<>"/dev/tcp/127.0.0.1/$AFFIDO_PORT") 2>/dev/null; then
    if ! docker ps --format '{{.Names}}' | grep -qx "$AFFIDO_STACK-caddy"; then
      die "port $AFFIDO_PORT is taken by another program (free it, or set AFFIDO_PORT)"
    fi
  fi
}

# guard_host keeps sandboxes off the host: an internal Docker network still
# lets its containers reach anything on the host that listens on 0.0.0.0
# (through the bridge address), so drop every new connection from the
# sandbox pool to the host itself. Replies to the host's own connections
# still pass, and traffic to Caddy is bridged, not INPUT.
GUARD=(INPUT -s "$AFFIDO_SANDBOX_POOL" -m conntrack --ctstate NEW -j DROP)

guard_host() {
  if ! command -v iptables >/dev/null 2>&1 || [[ $(id -u) -ne 0 ]]; then
    echo "dev.sh: WARNING: cannot add the iptables rule that keeps sandboxes from reaching host services (need root and iptables)" >&2
    return
  fi
  iptables -C "${GUARD[@]}" 2>/dev/null || iptables -I "${GUARD[@]}" \
    || echo "dev.sh: WARNING: adding the iptables rule that keeps sandboxes off the host failed" >&2
}

unguard_host() {
  command -v iptables >/dev/null 2>&1 || return 0
  while iptables -D "${GUARD[@]}" 2>/dev/null; do :; done
}

cmd_up() {
  while [[ $# -gt 0 ]]; do
    case $1 in
      --provider) AFFIDO_PROVIDER=${2:-}; shift 2 ;;
      --provider=*) AFFIDO_PROVIDER=${1#*=}; shift ;;
      *) die "up: unknown option $1 (see ./dev.sh help)" ;;
    esac
  done
  case $AFFIDO_PROVIDER in
    fake|openrouter) ;;
    *) die "--provider must be fake or openrouter" ;;
  esac
  export AFFIDO_PROVIDER
  if [[ $AFFIDO_PROVIDER == openrouter && -z "${AFFIDO_OPENROUTER_KEY:-}" ]]; then
    local keyfile=${AFFIDO_SECRETS_FILE:-.secrets/openrouter.key}
    [[ -r "$keyfile" ]] || die "--provider openrouter needs the key in $keyfile (or AFFIDO_OPENROUTER_KEY, or AFFIDO_SECRETS_FILE=path)"
    AFFIDO_OPENROUTER_KEY=$(tr -d '[:space:]' < "$keyfile")
    export AFFIDO_OPENROUTER_KEY
    [[ -n "${AFFIDO_DEFAULT_MODEL:-}" ]] || die "--provider openrouter needs AFFIDO_DEFAULT_MODEL, for example openai/gpt-4o-mini"
  fi
  cmd_build
  port_free_or_ours
  guard_host
  say "starting the control plane ($AFFIDO_STACK)"
  compose up -d >/dev/null 2>&1 || compose up -d
  wait_healthy
  seed_dev_session
  cat <<EOF

Affido is up on http://127.0.0.1:$AFFIDO_PORT (provider: $AFFIDO_PROVIDER)

Try it (the first request provisions $DEV_USER's sandbox):
  curl -H 'Cookie: better-auth.session_token=$DEV_TOKEN' http://127.0.0.1:$AFFIDO_PORT/u/$DEV_USER/health
  ./dev.sh status
Sign in (dev only): user $DEV_USER, password $DEV_PASSWORD
  curl -c jar -H 'Content-Type: application/json' -X POST http://127.0.0.1:$AFFIDO_PORT/auth/sign-in \\
    -d '{"user":"$DEV_USER","password":"$DEV_PASSWORD"}'
EOF
}

cmd_reload() {
  cmd_build
  guard_host
  say "restarting the control plane with the new images"
  compose up -d >/dev/null 2>&1 || compose up -d
  wait_healthy
  seed_dev_session
  # The manager reads the agent image's id at start: restarted, it retires
  # the warm pool made from the old image and builds it anew.
  docker restart -t 20 "$AFFIDO_STACK-manager" >/dev/null # its drain (compose.yaml's stop_grace_period)
  wait_healthy
  # Recreate every user's sandbox container on the new agent image; volumes stay.
  local u
  for u in $(admin sandboxes | awk 'NR > 1 && $1 != "-" { print $1 }' | sort -u); do
    admin evict "$u" >/dev/null
    echo "recreated on next request: $u"
  done
}

cmd_status() {
  echo "Control plane ($AFFIDO_STACK):"
  compose ps 2>/dev/null || true
  echo
  echo "Sandboxes:"
  admin sandboxes 2>/dev/null || docker ps -a --filter "label=affido.stack=$AFFIDO_STACK" --filter label=affido.managed=true \
    --format 'table {{.Label "affido.sandbox"}}\t{{.Status}}'
  echo
  echo "Volumes:"
  docker volume ls --filter "label=affido.stack=$AFFIDO_STACK" --format '{{.Name}}'
}

cmd_logs() { compose logs -f --tail 100 "$@"; }

cmd_token() {
  [[ $# -eq 1 ]] || die "usage: ./dev.sh token USER"
  admin token "$1"
}

cmd_bench() {
  [[ -n "$(manager_id)" ]] || die "the control plane is not running (./dev.sh up)"
  CGO_ENABLED=0 go build -trimpath -o "$BUILD/bin/" ./cmd/affido
  "$BUILD/bin/affido" bench --url "http://127.0.0.1:$AFFIDO_PORT" --stack "$AFFIDO_STACK" "$@"
  say "the web client at a phone's size (chromium): first paint, sign-in to usable, bytes of a cold load"
  AFFIDO_WEB_BENCH=1 AFFIDO_E2E_URL="http://127.0.0.1:$AFFIDO_PORT" AFFIDO_STACK="$AFFIDO_STACK" \
    go test -tags e2e -count=1 -v -run '^TestWebBench$' ./e2e-test/ | grep -E '^(web client|  [a-z])' || true
  say "the agent's browser (a sandbox of affido/browser:dev against a local page): first page in a new sandbox, a warm open, the live view's pictures, memory at rest with one tab"
  AFFIDO_TEST_DOCKER=1 go test -count=1 -v -run '^TestBrowserSandboxOnDocker$' ./manager/provision/ | grep -o 'bench: .*' || true
  say "durable runtime: commit per step and a one-tool turn (SQLite; Postgres beside it when AFFIDO_TEST_POSTGRES_DSN names one), SIGKILL to first resumed step (ns/op is the mean)"
  [[ -n ${AFFIDO_TEST_POSTGRES_DSN:-} ]] || echo "(no AFFIDO_TEST_POSTGRES_DSN: the Postgres rows skip)"
  go test -run '^$' -bench 'StepCommit|OneToolTurn|Recover' -benchtime 500x ./agent/durable/ | grep '^Benchmark'
  say "a one-tool turn: fresh, after 2000 entries without compaction, and with it (goal: within 2x of fresh)"
  go test -run '^$' -bench 'LongConversationTurn' -benchtime 200x ./agent/durable/ | grep '^Benchmark'
}

# cmd_backup writes the registry (pg_dump, custom format) and every user's
# archive (affido admin backup: each agent's store, data and workspace,
# with a manifest of SHA-256s) into one directory, then SHA256SUMS over
# them. A user's sandbox is brought up for it if it was not running.
cmd_backup() {
  local dir="" keep=0
  while [[ $# -gt 0 ]]; do
    case $1 in
      --keep) [[ $# -ge 2 && "$2" =~ ^[0-9]+$ ]] || die "backup: --keep takes a number"; keep=$2; shift ;;
      -*) die "backup: unknown option $1" ;;
      *) dir=$1 ;;
    esac
    shift
  done
  local oltp
  oltp=$(compose ps -q oltp)
  [[ -n "$oltp" && -n "$(manager_id)" ]] || die "the control plane is not running (./dev.sh up)"
  dir=${dir:-backups/$AFFIDO_STACK-$(date -u +%Y%m%dT%H%M%SZ)}
  mkdir -p "$dir"
  BACKUP_PARTIAL="$dir/.partial" # global: the trap runs after this function returns
  local tmp=$BACKUP_PARTIAL
  trap 'rm -f "$BACKUP_PARTIAL"' EXIT
  say "Postgres -> $dir/postgres.dump"
  docker exec "$oltp" pg_dump -U affido -d affido -Fc >"$tmp"
  mv "$tmp" "$dir/postgres.dump"
  local user failed=()
  for user in $(docker exec "$oltp" psql -At -U affido -d affido -c "SELECT user_id FROM sandboxes ORDER BY 1"); do
    say "$user -> $dir/$user.tar"
    if docker exec "$(manager_id)" /bin/affido admin backup "$user" -o - >"$tmp"; then
      mv "$tmp" "$dir/$user.tar"
    else
      failed+=("$user")
    fi
  done
  (cd "$dir" && sha256sum -- * >SHA256SUMS)
  [[ ${#failed[@]} -eq 0 ]] || die "backup: $dir is missing ${failed[*]} (their backup failed, see above); nothing old was removed"
  if [[ "$keep" -gt 0 ]]; then
    find backups -mindepth 1 -maxdepth 1 -type d -name "$AFFIDO_STACK-*" | sort -r | tail -n +"$((keep + 1))" | xargs -r rm -rf
  fi
  echo "backup: $dir"
}

cmd_down() {
  compose stop
  echo "stopped; sandbox containers, volumes and the registry are kept (./dev.sh up to start again)"
}

cmd_reset() {
  local yes=no keep_images=no
  while [[ $# -gt 0 ]]; do
    case $1 in
      -y) yes=yes ;;
      --keep-images) keep_images=yes ;;
      *) die "reset: unknown option $1" ;;
    esac
    shift
  done
  if [[ "$yes" != yes ]]; then
    read -r -p "Remove every $AFFIDO_STACK container, network, volume and image? [y/N] " answer
    [[ "$answer" == y || "$answer" == Y ]] || { echo "nothing removed"; exit 0; }
  fi
  local f="label=affido.stack=$AFFIDO_STACK"
  # Sandboxes (and test helpers) first: they hold the networks compose removes.
  docker ps -aq --filter "$f" | xargs -r docker rm -f >/dev/null
  compose down -v --remove-orphans >/dev/null 2>&1 || true
  docker network ls -q --filter "$f" | xargs -r docker network rm >/dev/null
  docker volume ls -q --filter "$f" | xargs -r docker volume rm -f >/dev/null
  # What compose created under the project name, should compose itself have failed.
  docker network rm "${AFFIDO_STACK}_control" >/dev/null 2>&1 || true
  docker volume rm -f "${AFFIDO_STACK}_oltp" "${AFFIDO_STACK}_pgsocket" >/dev/null 2>&1 || true
  rm -rf ".secrets/$AFFIDO_STACK" # the stack's own keys go with its data
  unguard_host
  if [[ "$keep_images" == yes ]]; then
    echo "reset: no $AFFIDO_STACK containers, networks or volumes left (images kept)"
    return
  fi
  docker image rm -f "${IMAGES[@]}" >/dev/null 2>&1 || true
  rm -rf "$BUILD"
  echo "reset: no $AFFIDO_STACK containers, networks, volumes or images left"
}

main() {
  local cmd=${1:-help}
  shift || true
  case $cmd in
    up) cmd_up "$@" ;;
    build) cmd_build ;;
    prepare) cmd_prepare ;;
    reload) cmd_reload ;;
    status) cmd_status ;;
    logs) cmd_logs "$@" ;;
    token) cmd_token "$@" ;;
    bench) cmd_bench "$@" ;;
    backup) cmd_backup "$@" ;;
    down) cmd_down ;;
    reset) cmd_reset "$@" ;;
    help|-h|--help) usage ;;
    *) usage >&2; exit 2 ;;
  esac
}

main "$@"
