#!/usr/bin/env bash
# A Docker Swarm of three engines on this one machine, for trying and testing `orch --backend swarm`:
# a manager and two workers, each a dockerd of its own in a network namespace of its own (its own data-root,
# exec-root, pidfile, socket and cgroup parent; no bridge, no iptables), joined over veth links to a switch
# in a namespace of its own. All their traffic stays between these namespaces: the engines have no route
# anywhere else, and this machine's own engine, network and firewall are left alone.
#
#   scripts/swarm-cluster.sh up          start it (idempotent); prints the manager's DOCKER_HOST
#   scripts/swarm-cluster.sh env         the manager's DOCKER_HOST line (eval "$(scripts/swarm-cluster.sh env)")
#   scripts/swarm-cluster.sh status      exit 0 when its three nodes are up and ready
#   scripts/swarm-cluster.sh cut NODE    take NODE's link down (w1, w2): the swarm loses it
#   scripts/swarm-cluster.sh heal NODE   bring it back
#   scripts/swarm-cluster.sh load IMAGE  copy IMAGE from this machine's engine into every node's engine
#   scripts/swarm-cluster.sh down        stop the engines, remove the namespaces (images stay cached in
#                                        the data roots; `down --purge` removes those too)
#
# Needs root, iproute2, nsenter (util-linux) and dockerd (docker.io). Engines are started with `nsenter
# --net=...`, not `ip netns exec`: the latter remounts /sys, which hides the cgroup mounts ("Devices cgroup
# isn't mounted"). The kernel needs network namespaces, veth and VXLAN (overlay networks); without IPVS
# services use `endpoint_mode: dnsrr`, which orch's swarm backend does anyway.
set -euo pipefail

prefix="${ORCH_SWARM_PREFIX:-orch-sw}"
nodes=(mgr w1 w2)
subnet="198.18.231"            # RFC 2544's benchmarking range: never routed, never anyone's service
pool="10.231.0.0/16"           # the swarm's overlay subnets, away from the engines' and this machine's
state="/run/$prefix"           # exec roots, sockets, pid files, logs (gone at reboot, as the engines are)
data="/var/lib/$prefix"        # data roots: images survive a `down`, so the next `up` need not load them
timeout_s="${ORCH_SWARM_TIMEOUT:-60}"

die() { echo "swarm-cluster: $*" >&2; exit 1; }
addr() { case "$1" in mgr) echo "$subnet.1" ;; w1) echo "$subnet.2" ;; w2) echo "$subnet.3" ;; *) die "no node $1 (mgr, w1, w2)" ;; esac; }
sock() { echo "$state/$1/docker.sock"; }
on() { local node="$1"; shift; docker -H "unix://$(sock "$node")" "$@"; }
netns() { echo "$prefix-$1"; }
hub="$prefix-hub"

check() {
    ((EUID == 0)) || die "needs root (network namespaces and engines)"
    local tool
    for tool in ip nsenter dockerd docker; do
        command -v "$tool" >/dev/null || die "$tool is missing (apt-get install iproute2 util-linux docker.io)"
    done
    ip netns list >/dev/null 2>&1 || die "this kernel has no network namespaces"
    if ! ip link show "$prefix-probe" >/dev/null 2>&1; then
        ip link add "$prefix-probe" type vxlan id 4242 dstport 4789 dev lo 2>/dev/null \
            || die "this kernel has no VXLAN (overlay networks need it)"
        ip link del "$prefix-probe"
    fi
}

wait_for() {  # wait_for WHAT CMD...: poll CMD until it succeeds, within timeout_s
    local what="$1" deadline=$((SECONDS + timeout_s))
    shift
    until "$@" >/dev/null 2>&1; do
        ((SECONDS < deadline)) || die "$what: not within ${timeout_s}s"
        sleep 0.2
    done
}

link_up() {
    ip netns list | grep -qx "$hub\( .*\)\?" || ip netns add "$hub"
    ip -n "$hub" link show br0 >/dev/null 2>&1 || ip -n "$hub" link add br0 type bridge
    ip -n "$hub" link set lo up
    ip -n "$hub" link set br0 up
    local node ns
    for node in "${nodes[@]}"; do
        ns="$(netns "$node")"
        ip netns list | grep -qx "$ns\( .*\)\?" || ip netns add "$ns"
        if ! ip -n "$ns" link show eth0 >/dev/null 2>&1; then
            ip link add "$node" netns "$hub" type veth peer name eth0 netns "$ns"
            ip -n "$ns" addr add "$(addr "$node")/24" dev eth0
        fi
        ip -n "$hub" link set "$node" master br0 up
        ip -n "$ns" link set lo up
        ip -n "$ns" link set eth0 up
    done
}

engine_up() {
    local node="$1" ns dir
    ns="$(netns "$node")"
    dir="$state/$node"
    if on "$node" info >/dev/null 2>&1; then return; fi
    mkdir -p "$dir" "$data/$node"
    cat >"$dir/daemon.json" <<EOF
{"bridge": "none", "iptables": false, "ip6tables": false, "ip-masq": false, "userland-proxy": false,
 "data-root": "$data/$node", "exec-root": "$dir/exec", "pidfile": "$dir/docker.pid",
 "hosts": ["unix://$(sock "$node")"], "cgroup-parent": "$prefix-$node", "log-driver": "json-file",
 "insecure-registries": ["$(addr mgr):5000"]}
EOF
    rm -f "$dir/docker.pid"
    # A UTS namespace of its own too: the node's hostname is its name in `docker node ls` and in orch's messages.
    nsenter --net="/var/run/netns/$ns" unshare --uts -- sh -c "hostname $ns && exec dockerd --config-file $dir/daemon.json" \
        >"$dir/dockerd.log" 2>&1 </dev/null &
    echo $! >"$dir/launcher.pid"
    wait_for "the engine of $node (log: $dir/dockerd.log)" on "$node" info
}

swarm_up() {
    if [[ "$(on mgr info --format '{{.Swarm.LocalNodeState}}')" != active ]]; then
        on mgr swarm init --advertise-addr "$(addr mgr)" --listen-addr "$(addr mgr):2377" \
            --default-addr-pool "$pool" --dispatcher-heartbeat 1s >/dev/null
        # The routing mesh needs IPVS, which this kernel may lack; orch publishes no port.
        on mgr network rm ingress >/dev/null 2>&1 <<<y || true
    fi
    local token node
    token="$(on mgr swarm join-token -q worker)"
    for node in w1 w2; do
        if [[ "$(on "$node" info --format '{{.Swarm.LocalNodeState}}')" != active ]]; then
            on "$node" swarm join --token "$token" --advertise-addr "$(addr "$node")" \
                --listen-addr "$(addr "$node"):2377" "$(addr mgr):2377" >/dev/null
        fi
        on mgr node update --label-add "orch.node=$node" "$(on "$node" info --format '{{.Swarm.NodeID}}')" >/dev/null
    done
    wait_for "three ready nodes" ready_nodes 3
}

ready_nodes() {
    [[ "$(on mgr node ls --format '{{.Status}}' | grep -c '^Ready$')" -ge "$1" ]]
}

engine_down() {
    local node="$1" dir="$state/$1" pid
    for pid in "$dir/docker.pid" "$dir/launcher.pid"; do
        if [[ -s "$pid" ]] && kill -0 "$(cat "$pid")" 2>/dev/null; then
            kill "$(cat "$pid")" 2>/dev/null || true
        fi
    done
    if [[ -s "$dir/launcher.pid" ]]; then
        local deadline=$((SECONDS + timeout_s))
        while kill -0 "$(cat "$dir/launcher.pid")" 2>/dev/null; do
            ((SECONDS < deadline)) || { kill -9 "$(cat "$dir/launcher.pid")" 2>/dev/null || true; break; }
            sleep 0.2
        done
    fi
    # Left mounted by a dockerd killed hard: its network namespaces and overlay layers under exec/data roots.
    grep -o " $dir/[^ ]*\| $data/$node/[^ ]*" /proc/mounts | sort -r | xargs -r -n1 umount -l 2>/dev/null || true
    rm -rf "$dir"
}

case "${1:-}" in
    up)
        check
        link_up
        for node in "${nodes[@]}"; do engine_up "$node"; done
        swarm_up
        echo "DOCKER_HOST=unix://$(sock mgr)"
        ;;
    env)
        echo "export DOCKER_HOST=unix://$(sock mgr)"
        ;;
    status)
        [[ "$(on mgr info --format '{{.Swarm.LocalNodeState}}' 2>/dev/null)" == active ]] && ready_nodes 3
        ;;
    cut | heal)
        node="${2:-}"
        addr "$node" >/dev/null
        [[ "$1" == cut ]] && ip -n "$hub" link set "$node" down || ip -n "$hub" link set "$node" up
        ;;
    load)
        image="${2:?usage: swarm-cluster.sh load IMAGE}"
        docker image inspect "$image" >/dev/null || die "this machine's engine has no image $image"
        id="$(docker image inspect --format '{{.Id}}' "$image")"
        stale=()
        for node in "${nodes[@]}"; do
            [[ "$(on "$node" image inspect --format '{{.Id}}' "$image" 2>/dev/null)" == "$id" ]] || stale+=("$node")
        done
        ((${#stale[@]})) || exit 0
        # Saved once, loaded into the nodes side by side; their engines keep the layers they have.
        archive="$(mktemp "${TMPDIR:-/tmp}/orch-swarm-image.XXXXXX")"
        trap 'rm -f "$archive"' EXIT
        docker save "$image" >"$archive"
        pids=()
        for node in "${stale[@]}"; do
            { on "$node" load -q -i "$archive" >/dev/null && on "$node" image prune -f >/dev/null; } &
            pids+=($!)
        done
        for pid in "${pids[@]}"; do wait "$pid" || die "loading $image into a node failed"; done
        ;;
    down)
        for node in "${nodes[@]}"; do engine_down "$node"; done
        for node in "${nodes[@]}" hub; do ip netns del "$(netns "$node")" 2>/dev/null || true; done
        [[ "${2:-}" == --purge ]] && rm -rf "$data"
        rm -rf "$state"
        ;;
    *)
        sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'
        exit 2
        ;;
esac
