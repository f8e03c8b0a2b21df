// Package healthprom exports the state of a [health.Server] as Prometheus
// metrics, for an agent that serves its metrics with the Prometheus Go
// client (github.com/prometheus/client_golang).
//
// It is a module of its own, so that importing the health package never
// pulls in client_golang: an agent that does not use Prometheus, or pins
// another client_golang, is not made to carry this one.
//
// The collector reads [health.Server.Status] once per scrape, so every
// series of a scrape comes from one snapshot, and it costs the probes
// nothing. It lists the readiness conditions from [health.Conditions], so a
// condition added to the health package shows in the metrics with no edit
// here. Register it on the agent's own metrics endpoint, never on the
// unauthenticated probe port:
//
//	reg := prometheus.NewRegistry()
//	reg.MustRegister(healthprom.NewCollector(probes))
//	metricsMux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
package healthprom

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/meshnode/health"
	"github.com/prometheus/client_golang/prometheus"
)

// DefaultNamespace is the prefix of every metric name unless WithNamespace
// says otherwise: health_ready, health_check_runs_total, and so on.
const DefaultNamespace = "health"

// Option changes a collector's defaults.
type Option func(*options)

type options struct {
	namespace   string
	constLabels prometheus.Labels
}

// WithNamespace sets the prefix of every metric name, in place of
// DefaultNamespace, for an agent whose metrics all share its own prefix.
// It must be letters, digits and underscores, not starting with a digit;
// empty drops the prefix. Another value makes registering the collector
// fail with an error that quotes it.
func WithNamespace(namespace string) Option {
	return func(o *options) { o.namespace = namespace }
}

// WithConstLabels adds labels with fixed values to every series, as
// prometheus.Opts.ConstLabels does. A label named like one of the
// collector's own (condition, answer, subsystem, watchdog) makes
// registering the collector fail.
func WithConstLabels(labels prometheus.Labels) Option {
	return func(o *options) { o.constLabels = labels }
}

// NewCollector returns a collector of s's state. It panics if s is nil: a
// collector of no server is a wiring mistake, better found at start-up
// than at the first scrape.
func NewCollector(s *health.Server, opts ...Option) prometheus.Collector {
	if s == nil {
		panic("healthprom: NewCollector of a nil *health.Server")
	}
	o := options{namespace: DefaultNamespace}
	for _, opt := range opts {
		opt(&o)
	}
	return newCollector(s.Status, o)
}

// validNamespace is a metric name prefix that needs no quoting in any
// exposition format, which the conventions ask of every metric name.
var validNamespace = regexp.MustCompile(`^([a-zA-Z_][a-zA-Z0-9_]*)?$`)

// A collector's descriptors are fixed when it is made: a label, not a
// family, tells conditions, answers, subsystems and watchdogs apart, so
// Describe is exact and the registry checks every scrape against it.
type collector struct {
	status     func() health.Status
	err        error              // a bad option; reported by Describe and Collect
	conditions []condition        // every readiness condition, in table order
	descs      []*prometheus.Desc // all of the below, for Describe

	ready, readinessChanged *prometheus.Desc

	conditionUnmet *prometheus.Desc

	checkInstalled, checkRuns, checkFailures, checkPanics, checkStalls *prometheus.Desc
	checkLastDuration, checkLastReturn                                 *prometheus.Desc

	connsHeld, connsLimit, connsAccepted, connsEvicted, connsPressure *prometheus.Desc

	probes *prometheus.Desc

	subsystemStopped *prometheus.Desc

	watchdogOverdue, watchdogTimeout, watchdogLastBeat, watchdogBeats, watchdogTimeouts *prometheus.Desc
}

// condition is a readiness condition and its label value.
type condition struct {
	err   error
	label string
}

func newCollector(status func() health.Status, o options) *collector {
	c := &collector{status: status}
	if !validNamespace.MatchString(o.namespace) {
		c.err = fmt.Errorf("healthprom: namespace %q is not a metric name prefix: "+
			"letters, digits and underscores, not starting with a digit", o.namespace)
		return c
	}
	for _, err := range health.Conditions() {
		// The sentinel's text is a constant of the readiness table:
		// "registration pending" is the label registration_pending.
		c.conditions = append(c.conditions, condition{err, strings.ReplaceAll(err.Error(), " ", "_")})
	}
	desc := func(name, help string, labels ...string) *prometheus.Desc {
		d := prometheus.NewDesc(prometheus.BuildFQName(o.namespace, "", name), help, labels, o.constLabels)
		c.descs = append(c.descs, d)
		return d
	}

	c.ready = desc("ready", "Whether the node is ready: 1 when /readyz answers 200, 0 when it answers 503.")
	c.readinessChanged = desc("readiness_last_change_timestamp_seconds",
		"When the set of unmet readiness conditions last changed, in seconds since the Unix epoch: "+
			"since when the node has been ready, or not ready for its current reasons; its start until the first change.")
	c.conditionUnmet = desc("condition_unmet",
		"Whether a readiness condition is unmet (1) or met (0), one series per condition of the readiness table.",
		"condition")

	c.checkInstalled = desc("check_installed", "Whether a data-plane check is set (1) or not (0).")
	c.checkRuns = desc("check_runs_total",
		"Data-plane checks that returned, failures, panics and calls of runtime.Goexit included.")
	c.checkFailures = desc("check_failures_total",
		"Data-plane checks that returned an error, panicked or called runtime.Goexit.")
	c.checkPanics = desc("check_panics_total", "Data-plane checks that panicked.")
	c.checkStalls = desc("check_stalls_total", "Data-plane checks that ran past the stall bound (three check periods).")
	c.checkLastDuration = desc("check_last_duration_seconds", "How long the last returned data-plane check ran.")
	c.checkLastReturn = desc("check_last_return_timestamp_seconds",
		"When the last data-plane check returned, in seconds since the Unix epoch; 0 before the first.")

	c.connsHeld = desc("connections_held", "Connections the probe listener holds now.")
	c.connsLimit = desc("connections_limit",
		"The bound on the connections the probe listener holds; 0 while Serve is not running.")
	c.connsAccepted = desc("connections_accepted_total", "Connections the probe listener accepted.")
	c.connsEvicted = desc("connections_evicted_total",
		"Connections the probe listener closed to make room, before they sent a request: a local flood's signature.")
	c.connsPressure = desc("connections_pressure", "Whether the probe listener is evicting connections to make room (1) or not (0).")

	c.probes = desc("probes_total",
		"Answers of the probe handler, by answer: healthz_ok, readyz_ok, readyz_not_ready, and other for 404 and 405.",
		"answer")

	c.subsystemStopped = desc("subsystem_stopped",
		"1 for each subsystem named by SetSubsystemStopped: a latch, which only a restart clears.", "subsystem")

	c.watchdogOverdue = desc("watchdog_overdue",
		"Watchdogs of this name that are overdue: not beaten yet, or not within their timeout.", "watchdog")
	c.watchdogTimeout = desc("watchdog_timeout_seconds",
		"The timeout in force of the watchdogs of this name, the config's or else the code's, "+
			"the shortest if they differ; 0 when the config disables them.", "watchdog")
	c.watchdogLastBeat = desc("watchdog_last_beat_timestamp_seconds",
		"When the stalest watchdog of this name last beat, in seconds since the Unix epoch; 0 while one has not beaten yet.",
		"watchdog")
	c.watchdogBeats = desc("watchdog_beats_total",
		"Beats of the watchdogs of this name, stopped ones included.", "watchdog")
	c.watchdogTimeouts = desc("watchdog_timeouts_total",
		"Times the watchdogs of this name ran past their timeout, stopped ones included.", "watchdog")
	return c
}

// Describe implements prometheus.Collector.
func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	if c.err != nil {
		ch <- prometheus.NewInvalidDesc(c.err)
		return
	}
	for _, d := range c.descs {
		ch <- d
	}
}

// Collect implements prometheus.Collector. It reads Status once, so a
// scrape never mixes two snapshots.
func (c *collector) Collect(ch chan<- prometheus.Metric) {
	if c.err != nil {
		ch <- prometheus.NewInvalidMetric(prometheus.NewInvalidDesc(c.err), c.err)
		return
	}
	st := c.status()
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		send(ch, d, prometheus.GaugeValue, v, labels...)
	}
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		send(ch, d, prometheus.CounterValue, float64(v), labels...)
	}

	gauge(c.ready, one(len(st.Unmet) == 0))
	gauge(c.readinessChanged, unixSeconds(st.Since))
	for _, cond := range c.conditions {
		gauge(c.conditionUnmet, one(slices.Contains(st.Unmet, cond.err)), cond.label)
	}

	gauge(c.checkInstalled, one(st.Check.Installed))
	counter(c.checkRuns, st.Check.Runs)
	counter(c.checkFailures, st.Check.Failures)
	counter(c.checkPanics, st.Check.Panics)
	counter(c.checkStalls, st.Check.Stalls)
	gauge(c.checkLastDuration, st.Check.LastDuration.Seconds())
	gauge(c.checkLastReturn, unixSeconds(st.Check.LastReturned))

	gauge(c.connsHeld, float64(st.Conns.Held))
	gauge(c.connsLimit, float64(st.Conns.Limit))
	counter(c.connsAccepted, st.Conns.Accepted)
	counter(c.connsEvicted, st.Conns.Evicted)
	gauge(c.connsPressure, one(st.Conns.Pressure))

	counter(c.probes, st.Probes.Liveness, "healthz_ok")
	counter(c.probes, st.Probes.ReadyOK, "readyz_ok")
	counter(c.probes, st.Probes.ReadyNotReady, "readyz_not_ready")
	counter(c.probes, st.Probes.Other, "other")

	seen := make(map[string]bool, len(st.Stopped))
	for _, name := range st.Stopped {
		label := labelValue(name)
		if !seen[label] {
			seen[label] = true
			gauge(c.subsystemStopped, 1, label)
		}
	}

	for _, w := range watchdogsByName(st.Watchdogs) {
		gauge(c.watchdogOverdue, float64(w.overdue), w.label)
		gauge(c.watchdogTimeout, w.shortestTimeout.Seconds(), w.label)
		gauge(c.watchdogLastBeat, unixSeconds(w.stalestBeat), w.label)
	}
	for _, w := range totalsByName(st.WatchdogTotals) {
		counter(c.watchdogBeats, w.Beats, w.Name)
		counter(c.watchdogTimeouts, w.Timeouts, w.Name)
	}
}

// watchdogSeries is what the gauges of one watchdog name show. Names may
// repeat (one per worker of a pool, say), and a registry fails a scrape
// with two series of the same labels, so the watchdogs of one name share
// their series: overdue counts them, the timeout is the shortest of those
// the config has not disabled (0 when it disabled them all: it disables
// by name, so a name is disabled or not as a whole), and the last beat is
// the stalest one's, zero while one has not beaten. A label
// per watchdog was the alternative, but a pool that replaces its workers
// would then make new series without end.
//
// The gauges describe the watchdogs watched now, so a name whose
// watchdogs have all stopped has none. Its counters come from
// Status.WatchdogTotals instead, which count the stopped watchdogs too:
// summed over the watchdogs watched now, they would fall when one stops,
// and Prometheus would read that as a reset.
type watchdogSeries struct {
	label           string
	overdue         int
	shortestTimeout time.Duration
	stalestBeat     time.Time
}

// watchdogsByName returns one watchdogSeries per label, in the order of
// each label's first watchdog.
func watchdogsByName(watchdogs []health.WatchdogStatus) []watchdogSeries {
	var series []watchdogSeries
	index := make(map[string]int, len(watchdogs))
	for _, w := range watchdogs {
		label := labelValue(w.Name)
		i, ok := index[label]
		if !ok {
			i = len(series)
			index[label] = i
			series = append(series, watchdogSeries{label: label, shortestTimeout: w.Timeout, stalestBeat: w.LastBeat})
		}
		s := &series[i]
		if w.Overdue {
			s.overdue++
		}
		if s.shortestTimeout == 0 || w.Timeout != 0 && w.Timeout < s.shortestTimeout {
			s.shortestTimeout = w.Timeout // 0 is disabled: the shortest of the others
		}
		if !s.stalestBeat.IsZero() && (w.LastBeat.IsZero() || w.LastBeat.Before(s.stalestBeat)) {
			s.stalestBeat = w.LastBeat
		}
	}
	return series
}

// totalsByName returns the totals with their names made label values, and
// added up where two names make one label: each of them never falls, so
// neither does their sum.
func totalsByName(totals []health.WatchdogTotals) []health.WatchdogTotals {
	var series []health.WatchdogTotals
	index := make(map[string]int, len(totals))
	for _, w := range totals {
		label := labelValue(w.Name)
		i, ok := index[label]
		if !ok {
			i = len(series)
			index[label] = i
			series = append(series, health.WatchdogTotals{Name: label})
		}
		series[i].Beats += w.Beats
		series[i].Timeouts += w.Timeouts
	}
	return series
}

// labelValue makes a subsystem's or a watchdog's name a label value. The
// agent chooses the names, and any string is a name, but a label value
// must be UTF-8: an invalid byte would fail the whole scrape, so it
// becomes U+FFFD.
func labelValue(name string) string { return strings.ToValidUTF8(name, "\uFFFD") }

// send sends one sample. A sample client_golang refuses (which labelValue
// and the fixed descriptors rule out) fails the scrape with the reason
// rather than panicking in the agent.
func send(ch chan<- prometheus.Metric, d *prometheus.Desc, t prometheus.ValueType, v float64, labels ...string) {
	m, err := prometheus.NewConstMetric(d, t, v, labels...)
	if err != nil {
		m = prometheus.NewInvalidMetric(d, err)
	}
	ch <- m
}

func one(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// unixSeconds is t in seconds since the Unix epoch, and 0 for the zero
// time, which has no such reading a dashboard could use.
func unixSeconds(t time.Time) float64 {
	if t.IsZero() {
		return 0
	}
	return float64(t.Unix()) + float64(t.Nanosecond())/1e9
}
