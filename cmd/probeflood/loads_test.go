package main

import (
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/meshnode/health/internal/hostile"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Every load the bars name exists, in the table's order, with its
// clients, limits and bars.
func TestAllLoads(t *testing.T) {
	ms := 20 * time.Millisecond
	for i, want := range []load{
		{id: "slowloris-idle", clients: slowlorisIdle, bar: 0.999, cpuBar: 1},
		{id: "options-body", clients: counts{"options": 2000}, bar: 0.999, cpuBar: 1},
		{id: "get-expect", clients: counts{"getexpect": 2000}, bar: 0.999, cpuBar: 1},
		{id: "get-trickle", clients: counts{"gettrickle": 2000}, bar: 0.999, cpuBar: 1},
		{id: "post-hugebody", clients: counts{"hugebody": 2000}, bar: 0.999, cpuBar: 0.5},
		{id: "get-hugebody", clients: counts{"gethugebody": 2000}, bar: 0.999, cpuBar: 0.5},
		{id: "bigheader", clients: counts{"bigheader": 2000}, bar: 0.999, cpuBar: 0.5},
		{id: "mix", clients: hostileMix, bar: 0.999, cpuBar: 0.5},
		{id: "slowloris-idle-0.05cpu", clients: slowlorisIdle, cpus: 0.05, bar: 0.999},
		{id: "slowloris-idle-0.25cpu", clients: slowlorisIdle, cpus: 0.25, bar: 0.999},
		{id: "mix-noloops-0.25cpu", clients: hostileMixNoLoops, cpus: 0.25, bar: 0.999},
		{id: "maxrequest-2000-0.25cpu", clients: counts{"maxrequest": 2000}, cpus: 0.25, bar: 0.999},
		{id: "slowloris-idle-fd1024", clients: slowlorisIdle, serverNofile: 1024, bar: 0.999},
		{id: "slowloris-idle-fd128", clients: slowlorisIdle, serverNofile: 128, bar: 0.999},
		{id: "slowloris-idle-5000-fd1024", clients: counts{"slowloris": 5000, "idle": 5000}, serverNofile: 1024, bar: 0.999},
		{id: "syncookies", clients: counts{"idle": 8000, "churn": 8}, probeDelay: ms, bar: 0.999},
		{id: "syncookies-fd128", clients: counts{"idle": 8000, "churn": 8}, serverNofile: 128, probeDelay: ms, bar: 0.90},
		{id: "maxrequest-4000", clients: counts{"maxrequest": 4000}, bar: 0.999},
		{id: "maxrequest-6000", clients: counts{"maxrequest": 6000}, bar: 0.97},
		{id: "churn", clients: counts{"churn": -1}, bar: 0.999},
		{id: "slowloris-idle-probe-20ms", clients: slowlorisIdle, probeDelay: ms, bar: 0.99},
	} {
		require.Less(t, i, len(allLoads), want.id)
		got := allLoads[i]
		want.name = got.name
		assert.Equal(t, want, got, want.id)
	}
	assert.Len(t, allLoads, 21)
}

// A load is named by what its clients send: its id is short words joined
// by '-', unique, and no id or name refers to another load by a number.
func TestLoadNames(t *testing.T) {
	idForm := regexp.MustCompile(`^[a-z0-9.]+(-[a-z0-9.]+)*$`)
	byNumber := regexp.MustCompile(`(?i)\bloads? [0-9]`)
	seen := map[string]bool{customID: true, allLoadsSpec: true}
	for _, l := range allLoads {
		assert.Regexp(t, idForm, l.id)
		assert.LessOrEqual(t, len(l.id), 26, l.id)
		assert.False(t, seen[l.id], "%s: taken", l.id)
		seen[l.id] = true
		assert.NotEmpty(t, l.name, l.id)
		assert.NotRegexp(t, byNumber, l.name, l.id)
		assert.NoError(t, l.clients.check(), l.id)
		assert.Positive(t, l.bar, "%s: every load has a bar", l.id)
		if l.cpus > 0 {
			assert.True(t, strings.HasSuffix(l.id, "cpu"), "%s: a CPU limit is in the id", l.id)
			assert.Contains(t, l.name, "server at ", l.id)
			assert.Zero(t, l.cpuBar, "%s: a limited server's CPU is its limit, no multiple of plain's", l.id)
		}
	}
}

func TestSelectLoads(t *testing.T) {
	custom := load{clients: counts{"slowloris": 10, "idle": 20, "churn": -1}, serverNofile: 512, probeDelay: 5 * time.Millisecond}
	for _, tc := range []struct {
		spec     string
		ids      []string
		err      string
		mutate   func(*load)
		lastName string
	}{
		{spec: "churn, slowloris-idle,custom", ids: []string{"churn", "slowloris-idle", "custom"},
			lastName: "custom: 10 slowloris + 20 idle + churn (one loop per core), server fd limit 512, probe delay 5ms"},
		{spec: "custom", ids: []string{"custom"}, mutate: func(l *load) { l.clients["options"] = 5; l.clients["noread"] = 7 },
			lastName: "custom: 10 slowloris + 20 idle + churn (one loop per core) + 5 options + 7 noread, server fd limit 512, probe delay 5ms"},
		{spec: "get-expect,get-trickle,get-hugebody", ids: []string{"get-expect", "get-trickle", "get-hugebody"}},
		{spec: "9", err: `-load: no load "9" (-loads lists them; custom is the one the attacker-count flags describe)`},
		{spec: "urgent", err: `-load: no load "urgent" (-loads lists them; custom is the one the attacker-count flags describe)`},
		{spec: "custom", mutate: func(l *load) { l.clients["idle"] = -1 }, err: "-idle -1: want a count of 0 or more (-1, one loop per core, is for the kinds that loop)"},
	} {
		c := custom
		c.clients = counts{}
		for k, v := range custom.clients {
			c.clients[k] = v
		}
		if tc.mutate != nil {
			tc.mutate(&c)
		}
		loads, err := selectLoads(tc.spec, c, 0)
		if tc.err != "" {
			assert.EqualError(t, err, tc.err, tc.spec)
			continue
		}
		require.NoError(t, err, tc.spec)
		var ids []string
		for _, l := range loads {
			ids = append(ids, l.id)
		}
		assert.Equal(t, tc.ids, ids, tc.spec)
		if tc.lastName != "" {
			assert.Equal(t, tc.lastName, loads[len(loads)-1].name, tc.spec)
		}
	}
	loads, err := selectLoads("all", load{}, 0)
	require.NoError(t, err)
	assert.Equal(t, allLoads, loads)
}

// -cpus limits every load without a limit of its own, and says so in its
// name; the loads with their own keep theirs, and the table is left as it
// is.
func TestSelectLoadsCPUs(t *testing.T) {
	custom := load{clients: counts{"idle": 20}}
	for _, tc := range []struct {
		spec, name string
		cpus       float64
	}{
		{"slowloris-idle", "1,000 slowloris + 1,000 idle, server at 0.5 cores (-cpus)", 0.5},
		{"slowloris-idle-0.05cpu", "1,000 slowloris + 1,000 idle, server at 0.05 cores", 0.05},
		{"custom", "custom: 20 idle, server fd limit 0, probe delay 0s, server at 0.5 cores", 0.5},
	} {
		loads, err := selectLoads(tc.spec, custom, 0.5)
		require.NoError(t, err)
		assert.Equal(t, tc.name, loads[0].name)
		assert.Equal(t, tc.cpus, loads[0].cpus)
	}
	loads, err := selectLoads("all", custom, 0.5)
	require.NoError(t, err)
	for _, l := range loads {
		assert.Positive(t, l.cpus, l.id)
	}
	assert.Zero(t, allLoads[0].cpus, "the table itself is left as it is")
	assert.Equal(t, "1,000 slowloris + 1,000 idle", allLoads[0].name)

	loads, err = selectLoads("slowloris-idle,custom", custom, 0)
	require.NoError(t, err)
	assert.Zero(t, loads[0].cpus)
	assert.Zero(t, loads[1].cpus)
	assert.Equal(t, "custom: 20 idle, server fd limit 0, probe delay 0s", loads[1].name)
}

// -loads prints the table docs/load.md quotes: each load's id, name,
// attackers, limits and bars, then the bounds every load holds health to.
func TestWriteLoads(t *testing.T) {
	var out strings.Builder
	writeLoads(&out)
	lines := strings.Split(out.String(), "\n")
	require.Len(t, lines, 2+len(allLoads)+3)
	assert.Equal(t, "| load | what it is | attackers | server fd limit | server CPU limit | probe writes after its handshake | bar: probes ok, on both endpoints | bar: health's CPU (-server both) |", lines[0])
	for _, want := range []string{
		"| slowloris-idle | 1,000 slowloris + 1,000 idle | 1,000 slowloris + 1,000 idle | as inherited | none | at once | ≥ 99.9 % | ≤ 1.0× plain's |",
		"| options-body | 2,000 OPTIONS * declaring a 4 KiB body never sent | 2,000 options | as inherited | none | at once | ≥ 99.9 % | ≤ 1.0× plain's |",
		"| post-hugebody | 2,000 POST /healthz declaring a 1 TiB body never sent | 2,000 hugebody | as inherited | none | at once | ≥ 99.9 % | ≤ 0.5× plain's |",
		"| bigheader | 2,000 GET /healthz with a 12 KiB header (431) | 2,000 bigheader | as inherited | none | at once | ≥ 99.9 % | ≤ 0.5× plain's |",
		"| mix | hostile mix: every hostile kind at once, 4,200 clients + connect-and-close and reset loops | " + hostileMix.describe() + " | as inherited | none | at once | ≥ 99.9 % | ≤ 0.5× plain's |",
		"| mix-noloops-0.25cpu | hostile mix without its connect-and-close and reset loops, 4,200 clients, server at 0.25 cores | " + hostileMixNoLoops.describe() + " | as inherited | 0.25 cores | at once | ≥ 99.9 % | — |",
		"| maxrequest-2000-0.25cpu | 2,000 complete ~4 KiB requests, each reconnecting once answered, server at 0.25 cores | 2,000 maxrequest | as inherited | 0.25 cores | at once | ≥ 99.9 % | — |",
		"| slowloris-idle-fd1024 | 1,000 slowloris + 1,000 idle, server fd limit 1024 | 1,000 slowloris + 1,000 idle | 1024 | none | at once | ≥ 99.9 % | — |",
		"| syncookies-fd128 | SYN cookies: 8,000 idle + 8 connect-and-close loops, probe writes 20 ms after its handshake, server fd limit 128 | 8,000 idle + 8 churn loops | 128 | none | 20ms | ≥ 90 % | — |",
		"| churn | connect-and-close loops, one per core | churn (one loop per core) | as inherited | none | at once | ≥ 99.9 % | — |",
	} {
		assert.Contains(t, lines, want)
	}
	assert.Equal(t, "", lines[len(lines)-3])
	assert.Equal(t, "Every client reconnects as soon as the server closes or answers it; a loop, without waiting for either. On health's row of every load: peak live heap ≤ 16 MiB, peak goroutines ≤ 4, ≤ 10 log lines (WARN and above), Serve returned ≤ 5 s after cancel.", lines[len(lines)-2])
}

// docs/load.md quotes the table -loads prints, and the command that
// prints it, so that the loads are listed once, here.
func TestLoadsTableInDocs(t *testing.T) {
	var table strings.Builder
	writeLoads(&table)
	doc, err := os.ReadFile("../../docs/load.md")
	require.NoError(t, err)
	assert.Contains(t, string(doc), "go run ./cmd/probeflood -loads", "docs/load.md names the command")
	assert.Contains(t, string(doc), table.String(), "docs/load.md quotes the output of probeflood -loads")
}

// The hostile mix runs every hostile kind, and maxrequest, which is not
// one, only in its own loads; without its loops, it runs the same clients
// that wait.
func TestHostileMix(t *testing.T) {
	for _, k := range hostile.Clients() {
		assert.NotZero(t, hostileMix[k.Name], k.Name)
		if k.Loops() {
			assert.Zero(t, hostileMixNoLoops[k.Name], k.Name)
		} else {
			assert.Equal(t, hostileMix[k.Name], hostileMixNoLoops[k.Name], k.Name)
		}
	}
	assert.Len(t, hostileMix, len(hostile.Clients()))
	assert.Zero(t, hostileMix["maxrequest"])
	assert.Equal(t, -1, hostileMix["churn"], "one churn loop per core")
	assert.NoError(t, hostileMix.check())
	assert.NoError(t, hostileMixNoLoops.check())
	assert.Equal(t, 4200, hostileMix.clients())
	assert.Equal(t, 4200, hostileMixNoLoops.clients())
	assert.NotContains(t, hostileMixNoLoops.describe(), "loop")
}

// A load's kinds reach the attack child through its flags.
func TestAttackArgsOfLoad(t *testing.T) {
	l, ok := findLoad("get-trickle")
	require.True(t, ok)
	fs, f := attackFlags()
	require.NoError(t, fs.Parse(attackArgs("127.0.0.1:9101", l.clients, time.Minute)[2:]))
	assert.Equal(t, counts{"gettrickle": 2000}, f.clients)
	_, ok = findLoad("custom")
	assert.False(t, ok, "custom is the command line's, not the table's")
}
