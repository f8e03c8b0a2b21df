// Command probeflood measures whether the kubelet keeps getting its probe
// answers while other local clients flood the health listener, and what
// the flood costs the server.
//
// It starts the server in a child process through the package's public API
// (NewServer, Listen, Serve), the attackers in a second child, and probes
// from its own process as the kubelet does: a fresh connection every
// 100 ms to /healthz and to /readyz, with a 1 s timeout. It prints one table
// row per load: probe success per endpoint, probe latency, and the server's
// peak RSS, peak live heap, peak goroutines, log lines of WARN and above,
// CPU (cores busy over the probing window, from its own rusage) and
// shutdown time under load.
//
// The loads are the rows of one table, each named by what its clients
// send (-load, ids comma-separated; all of them by default): -loads
// prints it, each load with its attackers, the server's descriptor and
// CPU limits, the probe's delay and its bars; docs/load.md quotes that
// output. Every attacker reconnects as soon as the server closes or
// answers it; -help lists the kinds, each with a flag for the custom load.
// -server plain runs a plain http.Server serving the package's Handler with
// the same timeouts instead of Serve, to compare the two; -server both runs
// each load against one and then the other, never at once, and prints
// both rows with health's CPU as a multiple of plain's.
//
// The tool checks the bars itself, in the same run, and exits non-zero
// when health's row of a load misses one: the share of probes answered on
// both endpoints; with -server both, for the loads that have one, health's
// CPU at most a multiple of plain's; and on every load the server bounds:
// peak live heap, peak goroutines, log lines and the time Serve takes to
// return once cancelled. Plain's rows are held to the probe bar alone and
// never fail the run: they are the yardstick. Each row's bar cell names
// the bars it was held to and, when it missed, which and by what figure.
//
// -cpus runs the server child under a CPU limit, as the kubelet runs a
// container with resources.limits.cpu: a CFS quota of that many cores in
// a 100 ms period, in a cgroup the command makes (cgroup v2's cpu.max or
// v1's cpu.cfs_quota_us, whichever the machine mounts, found in
// /proc/self/mountinfo), moves the server child into, and removes at the
// end, an interrupt included. The loads whose id ends in a number of
// cores, such as slowloris-idle-0.05cpu, have limits of their own, which
// -cpus leaves. Making a cgroup takes root; when no cgroup can be made,
// the error names each place tried and why it failed.
//
//	go run ./cmd/probeflood                  # every load, 20 s each
//	go run ./cmd/probeflood -loads           # the table of loads
//	go run ./cmd/probeflood -load options-body -duration 5s
//	go run ./cmd/probeflood -load mix -server plain
//	go run ./cmd/probeflood -load slowloris-idle,slowloris-idle-0.05cpu,mix-noloops-0.25cpu -server both
//	go run ./cmd/probeflood -load maxrequest-4000 -cpus 0.25
//	go run ./cmd/probeflood -load custom -options 500 -slowloris 0 -idle 0
//	go run ./cmd/probeflood -soak 5m         # the hostile mix for 5 minutes
//
// -soak runs the hostile mix's attackers (those of -load mix) for the
// given time while probing, stops them, waits 5 s, and prints the server's
// current RSS, goroutines and open descriptors before the attack, at its
// end and after that settle time, with the probes' success over the whole
// soak.
//
// Every connection goes to a loopback address, every loop ends by its
// deadline, and the attackers' connection count is capped.
//
// It runs on Linux only: it reads the kernel's TCP counters and the
// server's RSS and descriptors from /proc, its CPU time from getrusage, and
// sets the server's RLIMIT_NOFILE and cgroup. On other systems it still
// compiles, so that the module builds everywhere, but it exits at once
// with a message saying so rather than report figures it could not
// measure.
package main

import (
	"flag"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"time"
)

var verbose = flag.Bool("v", false, "print why each failed probe failed, to standard error")

func main() {
	role := flag.String("role", "", "internal: server or attack, the children this command starts, with their own flags after --")
	loads := flag.String("load", allLoadsSpec, "the ids of the loads to run, comma-separated (see -loads), or all; custom is the one the attacker-count flags describe")
	listLoads := flag.Bool("loads", false, "print the table of loads, as docs/load.md quotes it, and exit")
	custom := load{clients: counts{}}
	for _, k := range kinds {
		def := 0
		if k.Name == "slowloris" || k.Name == "idle" {
			def = 1000
		}
		custom.clients[k.Name] = def
		flag.Func(k.Name, fmt.Sprintf("custom load: how many %s clients (default %d): %s", k.Name, def, k.Help), func(v string) error {
			n, err := strconv.Atoi(v)
			custom.clients[k.Name] = n
			return err
		})
	}
	flag.IntVar(&custom.serverNofile, "server-nofile", 0, "custom load: the server's file-descriptor limit (0: leave it)")
	flag.DurationVar(&custom.probeDelay, "probe-delay", 0, "custom load: how long a probe waits after its handshake to send its request")
	flag.Float64Var(&custom.bar, "bar", 0, "custom load: the share of probes that must succeed, such as 0.999 (0: none)")
	flag.Float64Var(&custom.cpuBar, "cpu-bar", 0, "custom load: the most CPU health may spend as a multiple of plain's, such as 0.5, checked with -server both (0: none)")
	duration := flag.Duration("duration", 20*time.Second, "how long the prober probes under each load")
	addr := flag.String("addr", "", "probe and attack this loopback address instead of starting a server (server figures are then not reported)")
	server := flag.String("server", serverHealth, "the server child: health (the package's Listen + Serve), plain (an http.Server with the package's Handler and the same timeouts), or both: each load against health, then plain, in one table with health's CPU as a multiple of plain's, which the CPU bars need (the run fails on health's bars only)")
	cpus := flag.Float64("cpus", 0, "run the server child under a CPU limit of this many cores, such as 0.25: a CFS quota (100 ms period) in a cgroup the command makes and removes, v2 or v1, which takes root; for every load without a limit of its own, the custom load and -soak (0: no limit)")
	soak := flag.Duration("soak", 0, "instead of the loads, run the hostile mix's attackers (those of -load mix) this long (at most 1h) while probing, then report the server's RSS, goroutines and descriptors before, at the end and 5 s after")
	flag.Usage = usage
	flag.Parse()
	if *listLoads {
		writeLoads(os.Stdout)
		return
	}
	if runtime.GOOS != "linux" {
		fmt.Fprintf(os.Stderr, "probeflood: runs on Linux only (it reads /proc and sets RLIMIT_NOFILE); this is %s\n", runtime.GOOS)
		os.Exit(1)
	}

	err := checkCores("-cpus", *cpus, runtime.NumCPU())
	switch {
	case err != nil:
	case *role == "server":
		err = runServer(flag.Args())
	case *role == "attack":
		err = runAttack(flag.Args())
	case *role != "":
		err = fmt.Errorf("unknown -role %q", *role)
	case *server != serverHealth && *server != serverPlain && *server != serverBoth:
		err = fmt.Errorf("-server %q: want %s, %s or %s", *server, serverHealth, serverPlain, serverBoth)
	case *soak != 0:
		err = runSoak(*soak, *server, *addr, *cpus)
	default:
		err = runLoads(*loads, custom, *duration, *addr, *server, *cpus)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "probeflood:", err)
		os.Exit(1)
	}
}

func usage() {
	out := flag.CommandLine.Output()
	fmt.Fprintf(out, "usage: probeflood [-load ID,...|all|custom] [-duration 20s] [-server health|plain|both] [-cpus 0.25] [-addr 127.0.0.1:PORT] [custom load flags]\n")
	fmt.Fprintf(out, "       probeflood -soak 5m [-server health|plain] [-cpus 0.25]\n       probeflood -loads\n\nloads (all of them by default):\n\n")
	writeLoads(out)
	fmt.Fprintf(out, "\ncustom: the attacker counts below, -server-nofile, -probe-delay, -bar and -cpu-bar\n\nattackers (each reconnects as soon as the server closes or answers it):\n")
	for _, k := range kinds {
		fmt.Fprintf(out, "  %-14s  %s\n", k.Name, k.Help)
	}
	fmt.Fprintf(out, "\nhostile mix (-load mix and -soak): %s\n\n", hostileMix.describe())
	flag.PrintDefaults()
}
