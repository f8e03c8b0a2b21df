package health

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"time"
)

// Duration is a timeout in Config.Watchdogs, read and written as a Go
// duration string ("90s", "10m", 0 for none) by yaml.v3 and JSON alike.
type Duration time.Duration

// MarshalText writes d as time.Duration.String does: "10m0s".
func (d Duration) MarshalText() ([]byte, error) {
	return []byte(time.Duration(d).String()), nil
}

// UnmarshalText reads a Go duration string; anything else, such as "600",
// is an error quoting it. Validate, not it, refuses a negative one.
func (d *Duration) UnmarshalText(text []byte) error {
	v, err := time.ParseDuration(string(text))
	if err != nil {
		return fmt.Errorf("health: watchdog timeout %q is not a duration: "+
			`write a number and a unit, such as "90s", "10m" or "1h30m", or 0 to disable the watchdog`, text)
	}
	*d = Duration(v)
	return nil
}

// UnmarshalYAML is UnmarshalText for a scalar; a list or map is an error.
func (d *Duration) UnmarshalYAML(unmarshal func(any) error) error {
	// The older form of yaml.v3's Unmarshaler, which needs no import of
	// yaml: yaml.v3 alone would name only the type of a list or map.
	var text string
	if unmarshal(&text) == nil {
		return d.UnmarshalText([]byte(text))
	}
	var v any
	if err := unmarshal(&v); err != nil {
		return err
	}
	quoted, err := json.Marshal(v)
	if err != nil {
		quoted = fmt.Append(nil, v) // a map with keys that are no strings
	}
	return d.UnmarshalText(quoted)
}

// UnmarshalJSON reads a string as UnmarshalText does, and the number 0. It
// refuses null, which encoding/json would make 0, disabling the watchdog.
func (d *Duration) UnmarshalJSON(b []byte) error {
	// Without it encoding/json would give a number a type error that does
	// not quote it, and a null (a YAML key left empty, through
	// sigs.k8s.io/yaml) the zero Duration, switching hang detection off
	// without a word. A number is read by its text, which takes the 0
	// that sigs.k8s.io/yaml makes of "reconcile: 0".
	text := string(b)
	switch {
	case text == "null":
		return fmt.Errorf("health: watchdog timeout null is not a duration: " +
			`write one, such as "10m", or 0 to disable the watchdog`)
	case len(text) > 0 && text[0] == '"':
		if err := json.Unmarshal(b, &text); err != nil {
			return err
		}
	}
	return d.UnmarshalText([]byte(text))
}

// UnmarshalYAML decodes as yaml.v3 would without it, except that a watchdog
// with no value ("reconcile:"), which would mean 0, is an error.
func (c *Config) UnmarshalYAML(unmarshal func(any) error) error {
	// "As yaml.v3 would" is exact (TestConfigUnmarshalYAMLAsWithout):
	// KnownFields and its errors, fields left out keeping their values, a
	// null resetting Enabled and Watchdogs and leaving Listen as it was.
	//
	// The document's shape, with pointers where a value left out must be
	// told from the zero value. It is named Config, as the type it
	// stands for, because yaml.v3's errors name it: "field watchdog not
	// found in type health.Config", with KnownFields.
	type Config struct {
		Enabled   *bool                `yaml:"enabled"`
		Listen    *string              `yaml:"listen"`
		Watchdogs map[string]*Duration `yaml:"watchdogs"`
	}
	var doc Config
	// A type error leaves the rest decoded, as yaml.v3 does without
	// this method: the fields are set, and the error returned after.
	typeErr := unmarshal(&doc)
	var present map[any]any // which keys the document has, null or not
	if err := unmarshal(&present); err != nil {
		return err
	}
	for _, name := range slices.Sorted(maps.Keys(doc.Watchdogs)) {
		if doc.Watchdogs[name] == nil {
			return fmt.Errorf("health: watchdogs: name %q has no timeout: "+
				`write one, such as "10m", or 0 to disable the watchdog`, name)
		}
	}
	if _, ok := present["enabled"]; ok {
		c.Enabled = doc.Enabled
	}
	if doc.Listen != nil {
		c.Listen = *doc.Listen
	}
	if v, ok := present["watchdogs"]; ok && v == nil {
		c.Watchdogs = nil
	}
	if doc.Watchdogs != nil && c.Watchdogs == nil {
		c.Watchdogs = make(map[string]Duration, len(doc.Watchdogs))
	}
	for name, d := range doc.Watchdogs {
		c.Watchdogs[name] = *d
	}
	return typeErr
}

// validateWatchdogs is Validate's part for Watchdogs: the first bad entry
// in the order of the names, so that the error is the same on every run.
// An empty name is a key left blank, and a name with a control byte or a
// byte outside ASCII is none an agent gives Watch: both are slips of the
// operator's, refused (quoted, so that no raw byte reaches the log).
func (c *Config) validateWatchdogs() error {
	for _, name := range slices.Sorted(maps.Keys(c.Watchdogs)) {
		d := time.Duration(c.Watchdogs[name])
		switch {
		case name == "":
			return fmt.Errorf("health: watchdogs: name %q is empty: use the name the agent gives Watch", name)
		case !allBytes(name, isGraphicOrSpace):
			return fmt.Errorf("health: watchdogs: name %q holds a byte outside printable ASCII", name)
		case d < 0:
			return fmt.Errorf("health: watchdogs: name %q: timeout %v is negative; 0 disables the watchdog", name, d)
		case d > 0 && d < minOverride:
			return fmt.Errorf("health: watchdogs: name %q: timeout %v is under %v; 0 disables the watchdog", name, d, minOverride)
		}
	}
	return nil
}

// minOverride is the shortest timeout the config may set. Each deadline
// dumps the goroutines' stacks, stopping the world, so a slip such as
// "10ms" for "10m" would stop it many times a second and flip readiness
// on every turn; no loop of an agent's is meant to turn faster.
const minOverride = time.Second

// SetWatchdogs replaces the overrides in force (Config.Watchdogs at the
// start) with the whole map m: a name m leaves out is back to the code's
// timeout. An m Validate refuses changes nothing. A changed timeout takes
// effect at once, from the last Beat, logged at INFO, with no restart (the
// drain path); once ready, a name no Watch uses logs a WARN.
func (s *Server) SetWatchdogs(m map[string]Duration) error {
	if err := (&Config{Watchdogs: m}).validateWatchdogs(); err != nil {
		return err
	}
	m = maps.Clone(m)
	s.mu.Lock()
	defer s.unlock()
	// What the old overrides give now, whether their timers have run or
	// not, is where readiness moves from.
	s.expire()
	prev := s.overrides
	s.overrides = m
	var met []*Watchdog // to be stored met once the verdict is published
	for _, w := range s.watch.list {
		if s.retune(w, s.timeoutFor(w.name, w.code)) {
			met = append(met, w)
		}
	}
	if s.everReady {
		s.warnUnusedOverrides(m, prev)
	}
	s.watchDeadlines()
	s.update()
	for _, w := range met {
		if !w.overdue { // its longer deadline may have passed since retune read the clock
			w.met.Store(true)
		}
	}
	return nil
}

// timeoutFor returns the timeout in force for a watchdog of name whose
// code asks for code: the override's, when there is one and it is not
// negative. A negative one can come only from a Config that skipped
// Validate (SetWatchdogs refuses it); it is logged and ignored. s.mu must
// be held.
func (s *Server) timeoutFor(name string, code time.Duration) time.Duration {
	d, ok := s.overrides[name]
	switch {
	case !ok:
		return code
	case d < 0:
		s.log(slog.LevelError, "health: watchdog timeout set by config is negative; the code's is kept",
			"subsystem", name, "config", time.Duration(d), "timeout", code)
		return code
	}
	return time.Duration(d)
}

// retune gives the running watchdog w the timeout in force, logging a
// change, and reports whether w is to be stored met once the verdict is
// published (see Watchdog.met). A watchdog it makes met without a Beat
// (disabled, or late no more) logs no "responsive again": it did not beat;
// the line of the change says why. A change that an override's removal
// makes says so, and that the code's timeout is back: read as the config's,
// it would look like a new override of the code's value. s.mu must be
// held; the caller arms the timer and publishes.
func (s *Server) retune(w *Watchdog, timeout time.Duration) (storeMet bool) {
	if timeout == w.timeout {
		return false
	}
	if _, overridden := s.overrides[w.name]; overridden {
		s.log(slog.LevelInfo, "health: watchdog timeout set by config", "subsystem", w.name, "timeout", timeout)
	} else {
		s.log(slog.LevelInfo, "health: watchdog override removed; the code's timeout is back", "subsystem", w.name, "timeout", timeout)
	}
	wasDisabled := w.timeout == 0
	w.timeout = timeout
	switch {
	case wasDisabled:
		// Its Beats recorded no goroutine while it was disabled, and the
		// one recorded before may be long gone: the next Beat takes the
		// lock and records its own, for a later deadline's stack. met is
		// cleared before beats is read, so that a first Beat racing this
		// either is counted here or finds met false (see Watchdog.met).
		w.met.Store(false)
		beaten := w.beats.Load() > 0
		w.goid, w.unknownBeater = 0, beaten
		w.overdue = !beaten // no evidence yet, as at Watch
	case timeout == 0:
		w.overdue, w.late, w.stack = false, false, ""
		return true
	case w.late && w.beats.Load() > 0 && w.lateFrom == w.lastOnce() && s.sinceEpoch() < deadlineFrom(w.lateFrom, timeout):
		// Late no more under the longer timeout, and no Beat since the
		// deadline (last read once, so that a Beat storing it now cannot
		// pass the one test and fail the other): met. A Beat since, its
		// lock wait still to come, is left to recover it, with its line
		// and its goroutine. With no goroutine known, met stays false,
		// so that the next Beat records one.
		w.overdue, w.late, w.stack = false, false, ""
		return !w.unknownBeater
	}
	return false
}

// warnUnusedOverrides logs a WARN for each name of m, but those of prev,
// that no Watch has used: a misspelt override ("recnocile") otherwise does
// nothing, unnoticed. It runs once readiness has first been ready, by when
// an agent has watched its loops, and for the names a later SetWatchdogs
// brings. s.mu must be held.
func (s *Server) warnUnusedOverrides(m, prev map[string]Duration) {
	for _, name := range slices.Sorted(maps.Keys(m)) {
		if _, used := s.watch.names[name]; used {
			continue
		}
		if _, old := prev[name]; old {
			continue
		}
		s.log(slog.LevelWarn, "health: watchdog override matches no watchdog", "subsystem", name)
	}
}
