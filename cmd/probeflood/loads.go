package main

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/meshnode/health/internal/hostile"
)

// load is one row of the table.
type load struct {
	// id names the load on the command line (-load) and in messages:
	// words joined by '-', saying what its clients send, so that a
	// figure quoted anywhere stays tied to its load when the table
	// changes. The custom load's is "custom".
	id           string
	name         string        // what its clients send, and the server's limits: the tables' load column
	clients      counts        // attacking clients of each kind
	serverNofile int           // the server's RLIMIT_NOFILE, soft and hard; 0 leaves it
	probeDelay   time.Duration // between the probe's handshake and its request
	bar          float64       // the share of probes that must succeed; 0 (custom only) = report only
	// cpuBar is the most CPU health may spend, as a multiple of plain's
	// under the same load in the same run (-server both); 0 is none.
	// Where a plain server's cost is the contract's yardstick, a ratio
	// holds on any machine, where cores would not.
	cpuBar float64
	// cpus is the server's CPU limit in cores, a CFS quota in a cgroup, as
	// the kubelet sets for a container's resources.limits.cpu; 0 is none.
	cpus float64
}

// customID is the id of the load the attacker-count flags describe.
const customID = "custom"

// hostileMix is every hostile kind at once (maxrequest, valid requests, is
// not one): the mix load's, and the soak's. Each kind that waits for the
// server runs 200 clients, slowloris and idle 300; churn runs a loop per
// core, and the kinds that reset a loop each.
var hostileMix = func() counts {
	mix := counts{}
	for _, k := range hostile.Clients() {
		switch {
		case k.Name == "churn":
			mix[k.Name] = -1
		case k.Loops():
			mix[k.Name] = 1
		case k.Name == "slowloris", k.Name == "idle":
			mix[k.Name] = 300
		default:
			mix[k.Name] = 200
		}
	}
	return mix
}()

// hostileMixNoLoops is the hostile mix without its connect-and-close and
// reset loops: under a CPU limit the loops' handshakes alone fill a
// quarter core, for any server, so only without them does the load say
// what the clients that wait cost.
var hostileMixNoLoops = func() counts {
	mix := counts{}
	for name, n := range hostileMix {
		if k, _ := hostile.Find(name); !k.Loops() {
			mix[name] = n
		}
	}
	return mix
}()

// slowlorisIdle is the crowd of silent and trickling clients that most
// loads vary the server's limits under.
var slowlorisIdle = counts{"slowloris": 1000, "idle": 1000}

// synCookies is a crowd of more silent clients than the kernel's SYN queue
// holds (net.ipv4.tcp_max_syn_backlog), so that it completes handshakes
// with SYN cookies, and those connections, probes' included, arrive
// without TCP_DEFER_ACCEPT's wait, empty.
var synCookies = counts{"idle": 8000, "churn": 8}

// allLoads is the table of loads: first those alone on an uncapped server,
// with a CPU bar where a plain server is the yardstick; then those under
// a CPU limit, as a node agent's DaemonSet may set one, where the CPU a
// flood costs the server is taken from its answers to the probe; then the
// server's descriptor limits, SYN cookies, queues of complete requests,
// connect-and-close churn and a late probe.
var allLoads = []load{
	{id: "slowloris-idle", name: "1,000 slowloris + 1,000 idle", clients: slowlorisIdle, bar: 0.999, cpuBar: 1},
	{id: "options-body", name: "2,000 OPTIONS * declaring a 4 KiB body never sent", clients: counts{"options": 2000}, bar: 0.999, cpuBar: 1},
	{id: "get-expect", name: "2,000 GET /healthz with Expect: 100-continue, body never sent", clients: counts{"getexpect": 2000}, bar: 0.999, cpuBar: 1},
	{id: "get-trickle", name: "2,000 GET /healthz with a chunked body trickled, a 1-byte chunk a second", clients: counts{"gettrickle": 2000}, bar: 0.999, cpuBar: 1},
	{id: "post-hugebody", name: "2,000 POST /healthz declaring a 1 TiB body never sent", clients: counts{"hugebody": 2000}, bar: 0.999, cpuBar: 0.5},
	{id: "get-hugebody", name: "2,000 GET /healthz declaring a 1 TiB body never sent", clients: counts{"gethugebody": 2000}, bar: 0.999, cpuBar: 0.5},
	{id: "bigheader", name: "2,000 GET /healthz with a 12 KiB header (431)", clients: counts{"bigheader": 2000}, bar: 0.999, cpuBar: 0.5},
	{id: "mix", name: fmt.Sprintf("hostile mix: every hostile kind at once, %s clients + connect-and-close and reset loops", thousands(hostileMix.clients())), clients: hostileMix, bar: 0.999, cpuBar: 0.5},

	{id: "slowloris-idle-0.05cpu", name: "1,000 slowloris + 1,000 idle, server at 0.05 cores", clients: slowlorisIdle, cpus: 0.05, bar: 0.999},
	{id: "slowloris-idle-0.25cpu", name: "1,000 slowloris + 1,000 idle, server at 0.25 cores", clients: slowlorisIdle, cpus: 0.25, bar: 0.999},
	{id: "mix-noloops-0.25cpu", name: fmt.Sprintf("hostile mix without its connect-and-close and reset loops, %s clients, server at 0.25 cores", thousands(hostileMixNoLoops.clients())), clients: hostileMixNoLoops, cpus: 0.25, bar: 0.999},
	{id: "maxrequest-2000-0.25cpu", name: "2,000 complete ~4 KiB requests, each reconnecting once answered, server at 0.25 cores", clients: counts{"maxrequest": 2000}, cpus: 0.25, bar: 0.999},

	{id: "slowloris-idle-fd1024", name: "1,000 slowloris + 1,000 idle, server fd limit 1024", clients: slowlorisIdle, serverNofile: 1024, bar: 0.999},
	{id: "slowloris-idle-fd128", name: "1,000 slowloris + 1,000 idle, server fd limit 128", clients: slowlorisIdle, serverNofile: 128, bar: 0.999},
	{id: "slowloris-idle-5000-fd1024", name: "5,000 slowloris + 5,000 idle, server fd limit 1024", clients: counts{"slowloris": 5000, "idle": 5000}, serverNofile: 1024, bar: 0.999},
	{id: "syncookies", name: "SYN cookies: 8,000 idle + 8 connect-and-close loops, probe writes 20 ms after its handshake", clients: synCookies, probeDelay: 20 * time.Millisecond, bar: 0.999},
	{id: "syncookies-fd128", name: "SYN cookies: 8,000 idle + 8 connect-and-close loops, probe writes 20 ms after its handshake, server fd limit 128", clients: synCookies, serverNofile: 128, probeDelay: 20 * time.Millisecond, bar: 0.90},
	{id: "maxrequest-4000", name: "4,000 complete ~4 KiB requests, each reconnecting once answered", clients: counts{"maxrequest": 4000}, bar: 0.999},
	{id: "maxrequest-6000", name: "6,000 complete ~4 KiB requests, each reconnecting once answered", clients: counts{"maxrequest": 6000}, bar: 0.97},
	{id: "churn", name: "connect-and-close loops, one per core", clients: counts{"churn": -1}, bar: 0.999},
	{id: "slowloris-idle-probe-20ms", name: "1,000 slowloris + 1,000 idle, probe writes 20 ms after its handshake", clients: slowlorisIdle, probeDelay: 20 * time.Millisecond, bar: 0.99},
}

// allLoadsSpec is the -load that runs every load of the table.
const allLoadsSpec = "all"

// selectLoads returns the loads named in spec (ids, comma-separated, or
// all), custom standing for the one the command line describes. A CPU
// limit of cpus cores (-cpus; 0 is none) applies to every load that has
// none of its own, and says so in its name; a load with its own limit
// keeps it, so that a load is always what the table says it is.
func selectLoads(spec string, custom load, cpus float64) ([]load, error) {
	if strings.TrimSpace(spec) == allLoadsSpec {
		return withCPUs(allLoads, cpus), nil
	}
	var out []load
	for _, f := range strings.Split(spec, ",") {
		id := strings.TrimSpace(f)
		if id == customID {
			if err := custom.clients.check(); err != nil {
				return nil, err
			}
			custom.id = customID
			custom.name = fmt.Sprintf("custom: %s, server fd limit %d, probe delay %v", custom.clients.describe(), custom.serverNofile, custom.probeDelay)
			if cpus > 0 {
				custom.name += fmt.Sprintf(", server at %v cores", cpus)
				custom.cpus = cpus
			}
			out = append(out, custom)
			continue
		}
		l, ok := findLoad(id)
		if !ok {
			return nil, fmt.Errorf("-load: no load %q (-loads lists them; custom is the one the attacker-count flags describe)", id)
		}
		out = append(out, withCPUs([]load{l}, cpus)...)
	}
	return out, nil
}

// findLoad returns the table's load of that id.
func findLoad(id string) (load, bool) {
	for _, l := range allLoads {
		if l.id == id {
			return l, true
		}
	}
	return load{}, false
}

// withCPUs returns a copy of loads with the -cpus limit given to those
// that have none of their own, named in their names.
func withCPUs(loads []load, cpus float64) []load {
	out := append([]load(nil), loads...)
	for i, l := range out {
		if l.cpus == 0 && cpus > 0 {
			out[i].name += fmt.Sprintf(", server at %v cores (-cpus)", cpus)
			out[i].cpus = cpus
		}
	}
	return out
}

// writeLoads prints the table of loads, the one list of them: -loads and
// -help show it, and docs/load.md quotes it.
func writeLoads(w io.Writer) {
	fmt.Fprintln(w, tableHead("load", "what it is", "attackers", "server fd limit", "server CPU limit", "probe writes after its handshake", "bar: probes ok, on both endpoints", "bar: health's CPU (-server both)"))
	for _, l := range allLoads {
		nofile, cpus, delay, cpuBar := "as inherited", "none", "at once", "—"
		if l.serverNofile > 0 {
			nofile = fmt.Sprint(l.serverNofile)
		}
		if l.cpus > 0 {
			cpus = fmt.Sprintf("%v cores", l.cpus)
		}
		if l.probeDelay > 0 {
			delay = fmt.Sprint(l.probeDelay)
		}
		if l.cpuBar > 0 {
			cpuBar = "≤ " + multiple(l.cpuBar) + " plain's"
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | ≥ %s %% | %s |\n", l.id, l.name, l.clients.describe(), nofile, cpus, delay, strconv.FormatFloat(100*l.bar, 'f', -1, 64), cpuBar)
	}
	fmt.Fprintf(w, "\nEvery client reconnects as soon as the server closes or answers it; a loop, without waiting for either. On health's row of every load: %s.\n", serverBoundsText)
}
