package health

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"gopkg.in/yaml.v3"
)

// agentYAML is an agent's configuration with its health block.
type agentYAML struct {
	Health Config `yaml:"health"`
}

const notADuration = `is not a duration: write a number and a unit, such as "90s", "10m" or "1h30m", or 0 to disable the watchdog`

// TestDurationDecode reads a watchdog's timeout from YAML (gopkg.in/yaml.v3)
// and JSON, as the operator writes it: a Go duration string both ways, 0
// for none, and any other value an error that quotes it, a value left out
// included, which must never read as 0 and switch the watchdog off.
func TestDurationDecode(t *testing.T) {
	tests := []struct {
		name, yaml, json string
		want             Duration
		yamlErr, jsonErr string
	}{
		{name: "minutes", yaml: "10m", json: `"10m"`, want: Duration(10 * time.Minute)},
		{name: "quoted in YAML", yaml: `"90s"`, json: `"90s"`, want: Duration(90 * time.Second)},
		{name: "compound", yaml: "1h30m", json: `"1h30m"`, want: Duration(90 * time.Minute)},
		{name: "zero disables", yaml: "0", json: "0", want: 0},
		{name: "zero with a unit", yaml: "0s", json: `"0s"`, want: 0},
		{name: "negative decodes; Validate refuses it", yaml: "-1m", json: `"-1m"`, want: Duration(-time.Minute)},
		{name: "no unit", yaml: "600", json: "600",
			yamlErr: `health: watchdog timeout "600" ` + notADuration, jsonErr: `health: watchdog timeout "600" ` + notADuration},
		{name: "no unit, quoted", yaml: `"600"`, json: `"600"`,
			yamlErr: `health: watchdog timeout "600" ` + notADuration, jsonErr: `health: watchdog timeout "600" ` + notADuration},
		{name: "unknown unit", yaml: "10x", json: `"10x"`,
			yamlErr: `health: watchdog timeout "10x" ` + notADuration, jsonErr: `health: watchdog timeout "10x" ` + notADuration},
		{name: "a boolean", yaml: "true", json: "true",
			yamlErr: `health: watchdog timeout "true" ` + notADuration, jsonErr: `health: watchdog timeout "true" ` + notADuration},
		{name: "a control byte", yaml: `"1\x00m"`, json: `"1\u0000m"`,
			yamlErr: `health: watchdog timeout "1\x00m" ` + notADuration, jsonErr: `health: watchdog timeout "1\x00m" ` + notADuration},
		{name: "no value", yaml: "", json: "null",
			yamlErr: `health: watchdogs: name "reconcile" has no timeout: write one, such as "10m", or 0 to disable the watchdog`,
			jsonErr: `health: watchdog timeout null is not a duration: write one, such as "10m", or 0 to disable the watchdog`},
		{name: "null", yaml: "~", json: "null",
			yamlErr: `health: watchdogs: name "reconcile" has no timeout: write one, such as "10m", or 0 to disable the watchdog`,
			jsonErr: `health: watchdog timeout null is not a duration: write one, such as "10m", or 0 to disable the watchdog`},
		{name: "a map", yaml: "{a: 1}", json: `{"a":1}`,
			yamlErr: `health: watchdog timeout "{\"a\":1}" ` + notADuration,
			jsonErr: `health: watchdog timeout "{\"a\":1}" ` + notADuration},
		{name: "a list", yaml: "[10m]", json: `["10m"]`,
			yamlErr: `health: watchdog timeout "[\"10m\"]" ` + notADuration,
			jsonErr: `health: watchdog timeout "[\"10m\"]" ` + notADuration},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var y agentYAML
			err := yaml.Unmarshal([]byte("health:\n  watchdogs:\n    reconcile: "+tc.yaml+"\n"), &y)
			if tc.yamlErr != "" {
				assert.EqualError(t, err, tc.yamlErr)
			} else if assert.NoError(t, err) {
				assert.Equal(t, map[string]Duration{"reconcile": tc.want}, y.Health.Watchdogs)
			}

			var j Config
			err = json.Unmarshal([]byte(`{"watchdogs":{"reconcile":`+tc.json+`}}`), &j)
			if tc.jsonErr != "" {
				assert.EqualError(t, err, tc.jsonErr)
			} else if assert.NoError(t, err) {
				assert.Equal(t, map[string]Duration{"reconcile": tc.want}, j.Watchdogs)
			}
		})
	}
}

// TestDurationEncode writes timeouts back as Go duration strings, in YAML
// and JSON, and reads them back the same.
func TestDurationEncode(t *testing.T) {
	cfg := Config{Listen: "127.0.0.1:9101", Watchdogs: map[string]Duration{"reconcile": Duration(10 * time.Minute), "gc": 0}}

	b, err := json.Marshal(cfg)
	require.NoError(t, err)
	assert.Equal(t, `{"listen":"127.0.0.1:9101","watchdogs":{"gc":"0s","reconcile":"10m0s"}}`, string(b))
	var fromJSON Config
	require.NoError(t, json.Unmarshal(b, &fromJSON))
	assert.Equal(t, cfg, fromJSON)

	b, err = yaml.Marshal(agentYAML{Health: cfg})
	require.NoError(t, err)
	assert.Equal(t, "health:\n    enabled: null\n    listen: 127.0.0.1:9101\n    watchdogs:\n        gc: 0s\n        reconcile: 10m0s\n", string(b))
	var fromYAML agentYAML
	require.NoError(t, yaml.Unmarshal(b, &fromYAML))
	assert.Equal(t, cfg, fromYAML.Health)
}

// TestConfigUnmarshalYAML: the health block decodes through Config's own
// UnmarshalYAML as it would without it: every field, the strictness of a
// decoder with KnownFields, and the values of the fields the document
// leaves out, watchdogs merged into those already set.
func TestConfigUnmarshalYAML(t *testing.T) {
	no := false
	var y agentYAML
	require.NoError(t, yaml.Unmarshal([]byte("health:\n  enabled: false\n  listen: \"[::1]:9101\"\n  watchdogs: {reconcile: 10m, gc: 0}\n"), &y))
	assert.Equal(t, Config{Enabled: &no, Listen: "[::1]:9101", Watchdogs: map[string]Duration{"reconcile": Duration(10 * time.Minute), "gc": 0}}, y.Health)

	y = agentYAML{Health: Config{Listen: ":9101", Watchdogs: map[string]Duration{"gc": Duration(time.Hour)}}}
	require.NoError(t, yaml.Unmarshal([]byte("health:\n  watchdogs: {reconcile: 10m}\n"), &y))
	assert.Equal(t, Config{Listen: ":9101", Watchdogs: map[string]Duration{"reconcile": Duration(10 * time.Minute), "gc": Duration(time.Hour)}}, y.Health)

	dec := yaml.NewDecoder(strings.NewReader("health:\n  listen: \":9101\"\n  watchdog: {reconcile: 10m}\n"))
	dec.KnownFields(true)
	assert.EqualError(t, dec.Decode(&y), "yaml: unmarshal errors:\n  line 3: field watchdog not found in type health.Config")
}

// configWithout is Config without its UnmarshalYAML: what yaml.v3 makes
// of the same document on its own.
type configWithout struct {
	Enabled   *bool               `yaml:"enabled"`
	Listen    string              `yaml:"listen"`
	Watchdogs map[string]Duration `yaml:"watchdogs"`
}

// TestConfigUnmarshalYAMLAsWithout decodes each document over the same
// earlier values into Config and into configWithout, and finds the same
// fields and the same error: Config's UnmarshalYAML changes nothing but
// the null watchdog it refuses.
func TestConfigUnmarshalYAMLAsWithout(t *testing.T) {
	yes := true
	decode := func(doc string, strict bool, v any) error {
		dec := yaml.NewDecoder(strings.NewReader(doc))
		dec.KnownFields(strict)
		return dec.Decode(v)
	}
	for _, tc := range []struct {
		name, doc string
		strict    bool
	}{
		{"empty", "{}", false},
		{"enabled null", "enabled: ~", false},
		{"enabled no", "enabled: no", false},
		{"enabled off", "enabled: off", false},
		{"listen null", "listen: ~", false},
		{"listen empty", "listen: ''", false},
		{"watchdogs null", "watchdogs: ~", false},
		{"watchdogs empty", "watchdogs: {}", false},
		{"watchdogs merged", "watchdogs: {reconcile: 10m, gc: 0}", false},
		{"every field", "enabled: false\nlisten: '[::1]:9101'\nwatchdogs: {reconcile: 1m}", false},
		{"a type error, the rest decoded", "enabled: maybe\nlisten: ':9200'\nwatchdogs: {reconcile: 1m}", false},
		{"an unknown field, the rest decoded", "listen: ':9200'\nwatchdog: {reconcile: 1m}\nwatchdogs: {gc: 2m}", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Config{Enabled: &yes, Listen: ":9101", Watchdogs: map[string]Duration{"gc": Duration(time.Hour)}}
			want := configWithout{Enabled: &yes, Listen: ":9101", Watchdogs: map[string]Duration{"gc": Duration(time.Hour)}}
			wantErr := decode(tc.doc, tc.strict, &want)
			gotErr := decode(tc.doc, tc.strict, &got)
			if wantErr == nil {
				assert.NoError(t, gotErr)
			} else {
				assert.EqualError(t, gotErr, strings.ReplaceAll(wantErr.Error(), "health.configWithout", "health.Config"))
			}
			assert.Equal(t, want, configWithout(got))
		})
	}
}

func TestValidateWatchdogs(t *testing.T) {
	for _, tc := range []struct {
		name      string
		watchdogs map[string]Duration
		want      string
	}{
		{"none", nil, ""},
		{"overrides", map[string]Duration{"reconcile": Duration(10 * time.Minute), "peer watch": 0, "~!": Duration(time.Second)}, ""},
		{"empty name", map[string]Duration{"": Duration(time.Minute)},
			`health: watchdogs: name "" is empty: use the name the agent gives Watch`},
		{"newline", map[string]Duration{"re\nconcile": Duration(time.Minute)},
			`health: watchdogs: name "re\nconcile" holds a byte outside printable ASCII`},
		{"NUL", map[string]Duration{"a\x00": 0}, `health: watchdogs: name "a\x00" holds a byte outside printable ASCII`},
		{"DEL", map[string]Duration{"a\x7f": 0}, `health: watchdogs: name "a\x7f" holds a byte outside printable ASCII`},
		{"not ASCII", map[string]Duration{"réconcile": 0}, `health: watchdogs: name "réconcile" holds a byte outside printable ASCII`},
		{"not UTF-8", map[string]Duration{"a\xff": 0}, `health: watchdogs: name "a\xff" holds a byte outside printable ASCII`},
		{"under a second", map[string]Duration{"reconcile": Duration(10 * time.Millisecond)},
			`health: watchdogs: name "reconcile": timeout 10ms is under 1s; 0 disables the watchdog`},
		{"negative", map[string]Duration{"reconcile": Duration(-time.Second)},
			`health: watchdogs: name "reconcile": timeout -1s is negative; 0 disables the watchdog`},
		{"the first by name", map[string]Duration{"b": -1, "a": -2, "c\n": 0},
			`health: watchdogs: name "a": timeout -2ns is negative; 0 disables the watchdog`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := Config{Listen: DefaultListen, Watchdogs: tc.watchdogs}
			err := cfg.Validate()
			if tc.want == "" {
				assert.NoError(t, err)
				return
			}
			assert.EqualError(t, err, tc.want)
			assert.False(t, bytes.ContainsFunc([]byte(err.Error()), func(r rune) bool { return r < 0x20 || r == 0x7f }),
				"no raw control byte")
		})
	}
	cfg := Config{Listen: "", Watchdogs: map[string]Duration{"": -1}}
	assert.ErrorContains(t, cfg.Validate(), "health: listen is empty", "listen, the first field, first")
}

// TestWatchOverriddenByConfig: a name in Config.Watchdogs gets the
// config's timeout, logged once per Watch; 0 disables the watchdog (never
// unmet, no deadline, Beat and Stop as ever); a name not in the map keeps
// the code's timeout, and a negative one, which Validate refuses, is
// ignored with an ERROR line rather than a panic.
func TestWatchOverriddenByConfig(t *testing.T) {
	watchdogs := map[string]Duration{"reconcile": Duration(10 * time.Minute), "gc": 0, "bad": Duration(-time.Second)}
	logs := &logBuffer{}
	s := NewServer(Config{Listen: "127.0.0.1:0", Watchdogs: watchdogs}, slogTo(logs))
	logs.server = s
	watchdogs["other"] = 1 // the caller's map stays the caller's
	setLatches(s)

	reconcile := s.Watch("reconcile", time.Second)
	gc := s.Watch("gc", time.Second)
	other := s.Watch("other", time.Second)
	bad := s.Watch("bad", 2*time.Second)
	defer other.Stop()
	defer bad.Stop()
	assert.Equal(t, []WatchdogStatus{
		{Name: "reconcile", Timeout: 10 * time.Minute, Overdue: true},
		{Name: "gc", Timeout: 0},
		{Name: "other", Timeout: time.Second, Overdue: true},
		{Name: "bad", Timeout: 2 * time.Second, Overdue: true},
	}, s.Status().Watchdogs)
	assert.Equal(t, `subsystem unresponsive: "reconcile" (no beat yet, timeout 10m0s), "other" (no beat yet, timeout 1s), "bad" (no beat yet, timeout 2s)`,
		s.Ready().Error(), "the disabled one is met without a Beat")
	reconcile.Beat()
	other.Beat()
	bad.Beat()
	assert.NoError(t, s.Ready())

	assert.Zero(t, testing.AllocsPerRun(100, gc.Beat), "a disabled watchdog's Beat is a met one's")
	assert.Equal(t, uint64(101), s.Status().Watchdogs[1].Beats)
	assert.False(t, s.Status().Watchdogs[1].LastBeat.IsZero())
	reconcile.Stop()
	other.Stop()
	bad.Stop()
	assert.False(t, internals(s).timerArmed, "a disabled watchdog has no deadline to watch")
	assert.NoError(t, s.Ready())
	gc.Stop()
	assert.Empty(t, s.Status().Watchdogs)
	assert.Equal(t, []WatchdogTotals{{Name: "reconcile", Beats: 1}, {Name: "gc", Beats: 101}, {Name: "other", Beats: 1}, {Name: "bad", Beats: 1}},
		s.Status().WatchdogTotals)

	var lines []string
	for _, line := range healthLines(logs) {
		if strings.Contains(line, "watchdog timeout") {
			lines = append(lines, line)
		}
	}
	assert.Equal(t, []string{
		`level=INFO msg="health: watchdog timeout set by config" subsystem=reconcile timeout=10m0s`,
		`level=INFO msg="health: watchdog timeout set by config" subsystem=gc timeout=0s`,
		`level=ERROR msg="health: watchdog timeout set by config is negative; the code's is kept" subsystem=bad config=-1s timeout=2s`,
	}, lines)
}

// TestConfigTimeoutSetsTheDeadline: the config's timeout is the one the
// deadline timer keeps, shorter or longer than the code's, and the one the
// ERROR line names.
func TestConfigTimeoutSetsTheDeadline(t *testing.T) {
	logs := &logBuffer{}
	s := NewServer(Config{Listen: "127.0.0.1:0", Watchdogs: map[string]Duration{
		"reconcile": Duration(50 * time.Millisecond), "patient": Duration(time.Hour), "gc": 0}}, slogTo(logs))
	logs.server = s
	setLatches(s)
	gc := s.Watch("gc", time.Millisecond) // disabled: never beaten, and never late
	defer gc.Stop()
	patient := s.Watch("patient", time.Millisecond)
	defer patient.Stop()
	patient.Beat()
	w := s.Watch("reconcile", time.Hour)
	defer w.Stop()
	w.Beat()
	waitUnresponsive(t, s, "the config's 50 ms deadline")
	assert.Equal(t, `subsystem unresponsive: "reconcile" (no beat within 50ms)`, s.Ready().Error(), "patient, 1 ms in the code, is met, and gc disabled")
	assert.Equal(t, 1, logs.count(`level=ERROR msg="health: subsystem unresponsive" subsystem=reconcile timeout=50ms`))
}

// configLines are the lines of the watchdog overrides: set by config, a
// negative one ignored, an unused name.
func configLines(logs *logBuffer) []string {
	var lines []string
	for _, line := range healthLines(logs) {
		if strings.Contains(line, "watchdog timeout set by config") || strings.Contains(line, "watchdog override") {
			lines = append(lines, line)
		}
	}
	return lines
}

// TestSetWatchdogsRefusesBadInput checks that SetWatchdogs validates as
// Validate does, and that a refused map changes nothing: no timeout, no
// line.
func TestSetWatchdogsRefusesBadInput(t *testing.T) {
	s, logs := newTestServer(t)
	require.NoError(t, s.SetWatchdogs(map[string]Duration{"reconcile": Duration(10 * time.Minute)}))
	w := s.Watch("reconcile", 2*time.Minute)
	defer w.Stop()
	before := configLines(logs)
	for _, tc := range []struct {
		m   map[string]Duration
		err string
	}{
		{map[string]Duration{"": Duration(time.Minute)}, `health: watchdogs: name "" is empty: use the name the agent gives Watch`},
		{map[string]Duration{"reconcile": Duration(-time.Second)}, `health: watchdogs: name "reconcile": timeout -1s is negative; 0 disables the watchdog`},
		{map[string]Duration{"reconcile": Duration(10 * time.Millisecond)}, `health: watchdogs: name "reconcile": timeout 10ms is under 1s; 0 disables the watchdog`},
		{map[string]Duration{"a": Duration(time.Minute), "re\nconcile": 0}, `health: watchdogs: name "re\nconcile" holds a byte outside printable ASCII`},
	} {
		err := s.SetWatchdogs(tc.m)
		require.Error(t, err)
		assert.Equal(t, tc.err, err.Error())
		assert.Equal(t, (&Config{Listen: DefaultListen, Watchdogs: tc.m}).Validate().Error(), err.Error(), "as Validate says")
		assert.Equal(t, 10*time.Minute, s.Status().Watchdogs[0].Timeout, "changes nothing")
	}
	assert.Equal(t, before, configLines(logs), "a refused map logs nothing")
}

// TestSetWatchdogsRetunesARunningWatchdog walks one watchdog through every
// change SetWatchdogs can make, each taking effect at once: shorter (its
// deadline counted from its last Beat, never before), longer (a late
// watchdog recovers), back to the code's, unchanged (no line), disabled
// and enabled again.
func TestSetWatchdogsRetunesARunningWatchdog(t *testing.T) {
	s, logs, clk := newFakeClockReadyServer(t)
	w := s.Watch("reconcile", 30*time.Minute)
	defer w.Stop()
	w.Beat()
	require.NoError(t, s.Ready())

	clk.advance(500 * time.Millisecond)
	require.NoError(t, s.SetWatchdogs(map[string]Duration{"reconcile": Duration(time.Second)}))
	clk.advance(500*time.Millisecond - 1)
	assert.NoError(t, s.Ready(), "never before the last Beat plus the new timeout")
	clk.advance(1)
	require.ErrorIs(t, s.Ready(), ErrSubsystemUnresponsive, "at the last Beat plus the new timeout")
	takenStack(t, s, 0)

	require.NoError(t, s.SetWatchdogs(map[string]Duration{"reconcile": Duration(time.Hour)}))
	assert.NoError(t, s.Ready(), "late no more: the last Beat is within the hour")
	st := s.Status().Watchdogs[0]
	assert.Equal(t, WatchdogStatus{Name: "reconcile", Timeout: time.Hour, Beats: 1, LastBeat: st.LastBeat, Timeouts: 1}, st)
	assert.True(t, w.met.Load(), "a Beat needs no lock again")

	require.NoError(t, s.SetWatchdogs(nil))
	assert.Equal(t, 30*time.Minute, s.Status().Watchdogs[0].Timeout, "the code's again")
	require.NoError(t, s.SetWatchdogs(map[string]Duration{"other": Duration(time.Minute)}))

	require.NoError(t, s.SetWatchdogs(map[string]Duration{"reconcile": 0}))
	assert.Zero(t, s.Status().Watchdogs[0].Timeout)
	clk.advance(2 * time.Hour)
	assert.NoError(t, s.Ready(), "disabled: never unmet")
	w.Beat() // records nothing: a disabled watchdog's Beat is a met one's

	require.NoError(t, s.SetWatchdogs(map[string]Duration{"reconcile": Duration(time.Hour)}))
	assert.NoError(t, s.Ready(), "it beat while disabled: met until an hour after that Beat")
	clk.advance(2 * time.Hour)
	require.ErrorIs(t, s.Ready(), ErrSubsystemUnresponsive)
	assert.Equal(t, stackBeatWhileDisabled, takenStack(t, s, 0), "its last Beat was while disabled: the goroutine before is forgotten")

	waitLogWritten(s)
	assert.Equal(t, []string{
		`level=INFO msg="health: watchdog timeout set by config" subsystem=reconcile timeout=1s`,
		`level=INFO msg="health: watchdog timeout set by config" subsystem=reconcile timeout=1h0m0s`,
		`level=INFO msg="health: watchdog override removed; the code's timeout is back" subsystem=reconcile timeout=30m0s`,
		`level=WARN msg="health: watchdog override matches no watchdog" subsystem=other`,
		`level=INFO msg="health: watchdog timeout set by config" subsystem=reconcile timeout=0s`,
		`level=INFO msg="health: watchdog timeout set by config" subsystem=reconcile timeout=1h0m0s`,
	}, configLines(logs))
}

// TestSetWatchdogsRemovedOverrideSaysSo: when SetWatchdogs leaves out a
// name whose override changed its watchdog's timeout, the INFO line says
// the override was removed and the code's timeout is back, not that the
// config set one; a removal that changes no timeout logs nothing.
func TestSetWatchdogsRemovedOverrideSaysSo(t *testing.T) {
	removed := []string{`level=INFO msg="health: watchdog override removed; the code's timeout is back" subsystem=reconcile timeout=2m0s`}
	for _, tc := range []struct {
		name          string
		before, after map[string]Duration
		timeout       time.Duration // in force after
		lines         []string
	}{
		{"a longer timeout", map[string]Duration{"reconcile": Duration(10 * time.Minute)}, nil, 2 * time.Minute, removed},
		{"a disabled watchdog", map[string]Duration{"reconcile": 0}, map[string]Duration{"other": Duration(time.Minute)}, 2 * time.Minute, removed},
		{"the code's own timeout", map[string]Duration{"reconcile": Duration(2 * time.Minute)}, nil, 2 * time.Minute, []string{}},
		{"another name's", map[string]Duration{"reconcile": Duration(10 * time.Minute), "other": 0},
			map[string]Duration{"reconcile": Duration(10 * time.Minute)}, 10 * time.Minute, []string{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, logs := newTestServer(t)
			require.NoError(t, s.SetWatchdogs(tc.before))
			w := s.Watch("reconcile", 2*time.Minute)
			defer w.Stop()
			seen := len(configLines(logs))
			require.NoError(t, s.SetWatchdogs(tc.after))
			assert.Equal(t, tc.timeout, s.Status().Watchdogs[0].Timeout)
			assert.Equal(t, tc.lines, configLines(logs)[seen:])
		})
	}
}

// watchBeatenWhileDisabled watches name for code on s with the overrides
// disabling it, and beats it once: a Beat that records no goroutine.
func watchBeatenWhileDisabled(t *testing.T, s *Server, name string, code time.Duration) *Watchdog {
	t.Helper()
	require.NoError(t, s.SetWatchdogs(map[string]Duration{name: 0}))
	w := s.Watch(name, code)
	t.Cleanup(w.Stop)
	w.Beat()
	return w
}

// beatWhileDisabled returns a watchdog that beat while the overrides
// disabled it, then was switched back on to its code's minute.
func beatWhileDisabled(t *testing.T) (*Server, *Watchdog, *fakeClock) {
	s, _, clk := newFakeClockReadyServer(t)
	w := watchBeatenWhileDisabled(t, s, "reconcile", time.Minute)
	require.NoError(t, s.SetWatchdogs(nil))
	require.NoError(t, s.Ready(), "beaten: met until a minute after that Beat")
	require.False(t, w.met.Load(), "the next Beat takes the lock, to record its goroutine")
	return s, w, clk
}

// TestSetWatchdogsRecordsTheBeatingGoroutine switches on a watchdog that
// was disabled while its loop beat. A deadline before the loop's next
// Beat knows no goroutine; that Beat, before a deadline or after one,
// records its own, whose stack the next deadline shows, and it alone
// takes the lock.
func TestSetWatchdogsRecordsTheBeatingGoroutine(t *testing.T) {
	t.Run("a deadline before the next Beat", func(t *testing.T) {
		s, w, clk := beatWhileDisabled(t)
		clk.advance(2 * time.Minute)
		require.ErrorIs(t, s.Ready(), ErrSubsystemUnresponsive)
		assert.Equal(t, stackBeatWhileDisabled, s.Status().Watchdogs[0].Stack, "no goroutine is known")
		w.Beat()
		require.NoError(t, s.Ready(), "recovered")
		assert.True(t, w.met.Load())
		clk.advance(2 * time.Minute)
		require.ErrorIs(t, s.Ready(), ErrSubsystemUnresponsive)
		assert.Contains(t, takenStack(t, s, 0), "TestSetWatchdogsRecordsTheBeatingGoroutine", "this goroutine beat")
	})
	t.Run("the next Beat before a deadline", func(t *testing.T) {
		s, w, clk := beatWhileDisabled(t)
		w.Beat()
		assert.True(t, w.met.Load(), "only that Beat takes the lock")
		assert.Zero(t, testing.AllocsPerRun(100, w.Beat))
		clk.advance(2 * time.Minute)
		require.ErrorIs(t, s.Ready(), ErrSubsystemUnresponsive)
		assert.Contains(t, takenStack(t, s, 0), "TestSetWatchdogsRecordsTheBeatingGoroutine", "this goroutine beat")
	})
}

// TestSetWatchdogsEnablesAnUnbeatenWatchdog: a watchdog switched on
// before its loop's first Beat has no evidence, as at Watch: unmet until
// that Beat.
func TestSetWatchdogsEnablesAnUnbeatenWatchdog(t *testing.T) {
	s, _ := newReadyServer(t)
	require.NoError(t, s.SetWatchdogs(map[string]Duration{"gc": 0}))
	w := s.Watch("gc", time.Minute)
	defer w.Stop()
	require.NoError(t, s.Ready(), "disabled")
	require.NoError(t, s.SetWatchdogs(nil))
	assert.ErrorIs(t, s.Ready(), ErrSubsystemUnresponsive, "no Beat yet")
	w.Beat()
	assert.NoError(t, s.Ready())
}

// TestOverrideMatchesNoWatchdog checks the WARN for a misspelt override:
// none before readiness first turns ready, by when an agent has watched
// its loops; then one for each name no Watch has used, once; and one for
// each such name a later SetWatchdogs brings, but not again for a name
// already in force.
func TestOverrideMatchesNoWatchdog(t *testing.T) {
	logs := &logBuffer{}
	s := NewServer(Config{Watchdogs: map[string]Duration{
		"recnocile": Duration(time.Minute), "reconcile": Duration(time.Minute),
	}}, slogTo(logs))
	w := s.Watch("reconcile", 2*time.Minute)
	defer w.Stop()
	w.Beat()
	s.SetRegistered()
	waitLogWritten(s)
	assert.Empty(t, logs.count("matches no watchdog"), "not before readiness is first ready")
	s.SetDataPlaneReady()
	s.SetDeliveryStopped()
	s.SetDataPlaneCheck(t.Context(), nil)
	require.NoError(t, s.SetWatchdogs(map[string]Duration{
		"recnocile": Duration(time.Minute), "reconcile": Duration(time.Minute), "peer-wacth": Duration(2 * time.Minute),
	}))
	waitLogWritten(s)
	assert.Equal(t, []string{
		`level=INFO msg="health: watchdog timeout set by config" subsystem=reconcile timeout=1m0s`,
		`level=WARN msg="health: watchdog override matches no watchdog" subsystem=recnocile`,
		`level=WARN msg="health: watchdog override matches no watchdog" subsystem=peer-wacth`,
	}, configLines(logs))
}

// TestSetWatchdogsFirstBeatRacesEnable: a disabled watchdog's first Beat
// races the SetWatchdogs that switches it on. Once both have returned it
// has beaten within its hour, so it must be met, whichever came first:
// retune clears met before it reads the count of Beats (Watchdog.met).
func TestSetWatchdogsFirstBeatRacesEnable(t *testing.T) {
	for i := range 2000 {
		s := NewServer(Config{Watchdogs: map[string]Duration{"loop": 0}}, discardLogger())
		setLatches(s)
		w := s.Watch("loop", time.Hour)
		beaten := make(chan struct{})
		go func() {
			defer close(beaten)
			w.Beat()
		}()
		require.NoError(t, s.SetWatchdogs(nil)) // back to the code's hour
		<-beaten
		require.NoError(t, s.Ready(), "round %d: beaten once, within its hour", i)
		w.Stop()
	}
}

// TestSetWatchdogsStackAfterALateRetune: a watchdog late with no goroutine
// known (it beat only while disabled), made met by a longer timeout, then
// beaten while enabled: its next deadline shows that Beat's goroutine.
func TestSetWatchdogsStackAfterALateRetune(t *testing.T) {
	s, _, clk := newFakeClockReadyServer(t)
	w := watchBeatenWhileDisabled(t, s, "x", time.Hour)
	require.NoError(t, s.SetWatchdogs(map[string]Duration{"x": Duration(time.Minute)}))
	clk.advance(2 * time.Minute)
	require.Equal(t, stackBeatWhileDisabled, s.Status().Watchdogs[0].Stack)

	require.NoError(t, s.SetWatchdogs(map[string]Duration{"x": Duration(time.Hour)}))
	require.NoError(t, s.Ready(), "late no more")
	assert.False(t, w.met.Load(), "no goroutine known: the next Beat takes the lock")
	w.Beat()
	assert.True(t, w.met.Load())
	clk.advance(2 * time.Hour)
	require.ErrorIs(t, s.Ready(), ErrSubsystemUnresponsive)
	assert.Contains(t, takenStack(t, s, 0), "TestSetWatchdogsStackAfterALateRetune")
}

// inFlightLoop finishes a Beat whose first half (the store of its time and
// count) already ran, then hangs there, where a deadline's stack shows it.
func inFlightLoop(s *Server, w *Watchdog, finished chan<- struct{}, hang <-chan struct{}) {
	s.beatOverdue(w)
	close(finished)
	<-hang
}

// TestSetWatchdogsLeavesAnInFlightBeatItsRecovery: a late watchdog's loop
// beats, and before its Beat takes the lock, SetWatchdogs lengthens the
// timeout. The retune leaves the recovery to that Beat, which logs its
// line and records its goroutine, whose stack the next deadline shows.
func TestSetWatchdogsLeavesAnInFlightBeatItsRecovery(t *testing.T) {
	s, logs, clk := newFakeClockReadyServer(t)
	w := s.Watch("loop", time.Minute)
	defer w.Stop()
	w.Beat()
	clk.advance(2 * time.Minute)
	require.ErrorIs(t, s.Ready(), ErrSubsystemUnresponsive)

	// The Beat's first half, as Beat runs it before it finds met false
	// and waits for the lock.
	w.last.Store(int64(s.sinceEpoch()))
	w.beats.Add(1)
	require.False(t, w.met.Load())
	require.NoError(t, s.SetWatchdogs(map[string]Duration{"loop": Duration(10 * time.Minute)}))
	assert.ErrorIs(t, s.Ready(), ErrSubsystemUnresponsive, "the Beat in flight recovers it, not the retune")

	finished, hang := make(chan struct{}), make(chan struct{})
	defer close(hang)
	go inFlightLoop(s, w, finished, hang)
	<-finished
	require.NoError(t, s.Ready())
	assert.Equal(t, 1, logs.count("subsystem responsive again"), "the Beat ended the spell: its line")
	clk.advance(11 * time.Minute)
	require.ErrorIs(t, s.Ready(), ErrSubsystemUnresponsive)
	assert.Contains(t, takenStack(t, s, 0), "inFlightLoop", "the first Beat after the deadline: the goroutine where the loop hangs")
}

// TestFirstBeatAtTheFirstDeadline: a first Beat whose time and count are
// stored as the first deadline is found passed, before it takes the lock,
// leaves no goroutine known; the stack says no goroutine has beaten yet,
// never that the loop beat while disabled, which it never was.
func TestFirstBeatAtTheFirstDeadline(t *testing.T) {
	s, _, clk := newFakeClockReadyServer(t)
	w := s.Watch("loop", time.Minute)
	defer w.Stop()
	w.beats.Add(1) // the Beat's count is in; its lock is still to come
	clk.advance(2 * time.Minute)
	require.ErrorIs(t, s.Ready(), ErrSubsystemUnresponsive)
	assert.Equal(t, stackNoBeat, takenStack(t, s, 0))
}

// TestSetWatchdogsRacesARecoveringBeat races a late watchdog's Beat with
// a SetWatchdogs too short to cover its last Beat: whichever wins, the
// recovery is the Beat's, with its line.
func TestSetWatchdogsRacesARecoveringBeat(t *testing.T) {
	s, logs, clk := newFakeClockReadyServer(t)
	for i := range 300 {
		name := "loop" + strconv.Itoa(i)
		require.NoError(t, s.SetWatchdogs(nil))
		w := s.Watch(name, time.Minute)
		w.Beat()
		clk.advance(3 * time.Minute)
		beaten := make(chan struct{})
		go func() { w.Beat(); close(beaten) }()
		require.NoError(t, s.SetWatchdogs(map[string]Duration{name: Duration(2 * time.Minute)}))
		<-beaten
		require.NoError(t, s.Ready())
		require.Equal(t, 1, logs.count(`responsive again" subsystem=`+name+" "), "round %d", i)
		w.Stop()
	}
}
