package health

import (
	"context"
	"log/slog"
	"runtime"
	"sync"
	"time"
)

// logQueueSize bounds the log lines waiting for a slow or blocked sink. A
// change of readiness queues at most a few lines, so the bound is reached
// only when the sink has stopped taking lines for a long time (stderr
// whose reader stopped reading): memory stays bounded however long that
// lasts.
const logQueueSize = 256

// logQueue holds every line of the Server's between the call that makes it
// and its writing by a goroutine of the queue's own. A logger is the agent's
// code: its handler may block (a full stderr pipe blocks write(2), a remote
// sink hangs) or call back into the Server (a handler that adds Ready's
// state to each line). Written under Server.mu, such a line would hold
// readiness where it was and deadlock a handler that calls back; written by
// the caller once the lock is released, it would still hold the caller: a
// SetRegistered that never returns, a Beat that ends an overdue spell
// hanging its own loop, a Serve whose accepting goroutine stops, and with it
// liveness. So no caller writes: the verdict is published, the line queued,
// and the call returns.
//
// A line that reports a change of state is queued under Server.mu (log,
// logLater), so that lines keep the order of the changes; Serve's and the
// listener's are queued without it (logAsync). One goroutine writes at a
// time, in queue order. It is started when a line is queued and nobody is
// writing, and ends once it finds the queue empty, so a quiet Server runs
// none, and a blocked sink holds that one goroutine, never a pile of them.
type logQueue struct {
	logger   *slog.Logger // NewServer's; never changed
	mu       sync.Mutex
	lines    []logLine // oldest first
	flushing bool      // a goroutine is writing the queue's lines
}

// logLine is a queued line: the record to hand to the handler, and how
// many lines were dropped just before it. A line queued before it is
// whole has its record in later instead, where the writer waits for it.
type logLine struct {
	record  slog.Record
	dropped uint64
	later   *laterLine
}

// laterLine is a line that takes its place in the queue before its last
// attribute is known: a deadline's ERROR line, whose stack is taken after
// the verdict it causes is published (expire). The writer waits
// for it there, so that the lines after it keep their order.
type laterLine struct {
	record slog.Record // complete's alone until done is closed
	done   chan struct{}
}

// complete adds the last attributes and lets the writer write the line.
// It is called once, by the goroutine that queued the line.
func (l *laterLine) complete(args ...any) {
	l.record.Add(args...)
	close(l.done)
}

// log queues a line at level with the given attributes, as
// slog.Logger.Log would write it, with the time and the source of this
// call rather than of the write. s.mu must be held; release it with
// s.unlock, which has the line written.
func (s *Server) log(level slog.Level, msg string, args ...any) {
	s.logq.add(logLine{record: newRecord(level, msg, args)})
}

// logLater queues a line as log does, to be written once its complete is
// called with the last attributes; the lines queued after it wait for it.
// The caller must call complete, soon: until then nothing is written.
func (s *Server) logLater(level slog.Level, msg string, args ...any) *laterLine {
	l := &laterLine{record: newRecord(level, msg, args), done: make(chan struct{})}
	s.logq.add(logLine{later: l})
	return l
}

// logAsync queues a line made without s.mu (Listen's, Serve's and the
// listener's) and has it written. It is the listener's LogFunc.
func (s *Server) logAsync(level slog.Level, msg string, args ...any) {
	s.logq.add(logLine{record: newRecord(level, msg, args)})
	s.logq.flushInBackground()
}

// unlock releases s.mu, has the lines queued under it written, and has
// the stacks their ERROR lines wait for taken, in a goroutine of their
// own: a dump stops the world, and no caller (a setter, a Beat) waits
// for it.
func (s *Server) unlock() {
	due := s.stacksDue
	s.stacksDue = nil
	s.mu.Unlock()
	s.logq.flushInBackground()
	if len(due) > 0 {
		go s.takeStacks(due)
	}
}

// newRecord makes the record of a line, as slog.Logger.Log would, with the
// time of the call and the source of the package's function that logs.
func newRecord(level slog.Level, msg string, args []any) slog.Record {
	var pcs [1]uintptr
	runtime.Callers(3, pcs[:]) // the caller of log, logLater or logAsync, as slog's own methods record theirs
	r := slog.NewRecord(time.Now(), level, msg, pcs[0])
	r.Add(args...)
	return r
}

// add adds a line to the queue. When the queue is full, the oldest line is
// dropped and counted, so that after a long block the log ends on the
// latest state, and says how many lines it lost and where.
func (q *logQueue) add(line logLine) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.lines) == logQueueSize {
		// The next line inherits the count, so that the line saying
		// how many were dropped is written where they would have been.
		oldest := q.pop()
		q.lines[0].dropped += oldest.dropped + 1
	}
	q.lines = append(q.lines, line)
}

// pop removes the oldest line and returns it. q.mu must be held, and the
// queue not empty.
func (q *logQueue) pop() logLine {
	line := q.lines[0]
	q.lines[0] = logLine{} // its attributes are garbage once written
	q.lines = q.lines[1:]
	return line
}

// flushInBackground has the queued lines written by a goroutine of its
// own, started only when there is a line to write and nobody writing. It
// claims the writing before it starts the goroutine, so that callers that
// race start one between them.
func (q *logQueue) flushInBackground() {
	q.mu.Lock()
	start := len(q.lines) > 0 && !q.flushing
	q.flushing = q.flushing || start
	q.mu.Unlock()
	if start {
		go q.flushDetached()
	}
}

// flushDetached writes the queued lines on a goroutine of the queue's own,
// the writing already claimed for it. There a handler's panic would reach
// no caller that could recover it and would end the agent's process: so
// the line it panicked on is dropped, and the lines after it are written,
// unless another goroutine has taken the writing on meanwhile. A handler
// that calls runtime.Goexit, which no recover sees, ends this goroutine:
// the lines after it are handed to another.
func (q *logQueue) flushDetached() {
	returned := false
	defer func() {
		if !returned {
			q.flushInBackground()
		}
	}()
	for q.writeRecovering() && q.claimFlush() {
	}
	returned = true
}

// writeRecovering runs writeQueued and reports whether a handler panicked.
func (q *logQueue) writeRecovering() (panicked bool) {
	defer func() {
		if recover() != nil {
			panicked = true
		}
	}()
	q.writeQueued()
	return false
}

// claimFlush makes the calling goroutine the one writing the queue's
// lines, and reports whether it is: false when another one is.
func (q *logQueue) claimFlush() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.flushing {
		return false
	}
	q.flushing = true
	return true
}

// writeQueued writes the queued lines in order until the queue is empty,
// then gives up the writing, which the caller has claimed. No lock is held
// while the handler runs. A handler that panics still gives the writing
// up, so that later lines are written.
func (q *logQueue) writeQueued() {
	q.mu.Lock()
	locked := true
	defer func() {
		if !locked {
			q.mu.Lock()
		}
		q.flushing = false
		q.mu.Unlock()
	}()
	for len(q.lines) > 0 {
		line := q.pop()
		q.mu.Unlock()
		locked = false
		if line.dropped > 0 {
			r := slog.NewRecord(time.Now(), slog.LevelWarn, "health: log lines dropped", 0)
			r.Add("count", line.dropped)
			q.handle(r)
		}
		if line.later != nil {
			<-line.later.done
			line.record = line.later.record
		}
		q.handle(line.record)
		q.mu.Lock()
		locked = true
	}
}

// handle writes r as slog.Logger does, if the handler takes its level.
func (q *logQueue) handle(r slog.Record) {
	h := q.logger.Handler()
	ctx := context.Background()
	if h.Enabled(ctx, r.Level) {
		_ = h.Handle(ctx, r)
	}
}
