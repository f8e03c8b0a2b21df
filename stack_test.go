package health

import (
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestHeaderID(t *testing.T) {
	for _, tc := range []struct {
		header string
		id     uint64
	}{
		{"goroutine 7 [running]:\nmain.main()", 7},
		{"goroutine 18446744073709551615 [select]:", 18446744073709551615},
		{"goroutine 12 gp=0xc000 m=nil [chan receive]:", 12}, // GOTRACEBACK=system's header
		{"goroutine 7", 0},
		{"goroutine  7 [running]:", 0},
		{"goroutine x [running]:", 0},
		{"created by main.main in goroutine 1", 0},
		{"", 0},
	} {
		assert.Equal(t, tc.id, headerID([]byte(tc.header)), "%q", tc.header)
	}
	assert.NotZero(t, goroutineID())
}

// fakeDump is a dump of three goroutines in runtime.Stack's format, the
// last with the dump's final newline.
const fakeDump = "goroutine 1 [running]:\nmain.main()\n\t/src/main.go:9 +0x11c\n\n" +
	"goroutine 12 [sync.Mutex.Lock, 3 minutes]:\nsync.(*Mutex).Lock(...)\n\t/go/src/sync/mutex.go:46\nmain.reconcile()\n\t/src/main.go:20 +0x2d\ncreated by main.main in goroutine 1\n\t/src/main.go:13 +0x85\n\n" +
	"goroutine 123 [chan receive]:\nmain.watch()\n\t/src/main.go:30 +0x19\ncreated by main.main in goroutine 1\n\t/src/main.go:16 +0xe5\n"

// dumpOf returns a dump function that writes text, as much as fits, as
// runtime.Stack does, and counts its calls.
func dumpOf(text string, calls *int) func([]byte) int {
	return func(buf []byte) int {
		*calls++
		return copy(buf, text)
	}
}

// testDumper is a dumper on a fake clock, as a new Server's: every dump
// takes no time unless the test's dump moves the clock.
func testDumper() (*dumper, *fakeClock) {
	clk := newFakeClock()
	return &dumper{clock: clk}, clk
}

// TestStacksOf picks each goroutine's block out of a dump, alone and
// exactly as the runtime printed it, and, when there is none, the words
// of the one that wants it say why.
func TestStacksOf(t *testing.T) {
	d, _ := testDumper() // every dump takes no time: none is foreseen too long
	calls := 0
	d.dump = dumpOf(fakeDump, &calls)
	got, cut := d.stacksOf(maxDump, 3, []uint64{12, 1, 123, 99, 2})
	assert.Equal(t, map[uint64]string{
		12:  "goroutine 12 [sync.Mutex.Lock, 3 minutes]:\nsync.(*Mutex).Lock(...)\n\t/go/src/sync/mutex.go:46\nmain.reconcile()\n\t/src/main.go:20 +0x2d\ncreated by main.main in goroutine 1\n\t/src/main.go:13 +0x85",
		1:   "goroutine 1 [running]:\nmain.main()\n\t/src/main.go:9 +0x11c",
		123: "goroutine 123 [chan receive]:\nmain.watch()\n\t/src/main.go:30 +0x19\ncreated by main.main in goroutine 1\n\t/src/main.go:16 +0xe5",
	}, got, "none for 99 and 2: the dump ended without them")
	assert.False(t, cut)
	assert.Equal(t, 1, calls, "one dump for every id")
	deadline := wantedStack{goid: 99, exited: stackExited, notFound: stackNotFound}
	stall := wantedStack{goid: 99, exited: stackCheckExited, notFound: stackCheckNotFound}
	assert.Equal(t, "the goroutine that last beat has exited", deadline.text(got, cut))
	assert.Equal(t, "the check's goroutine has exited", stall.text(got, cut))
	assert.Equal(t, got[12], wantedStack{goid: 12}.text(got, cut))

	// A dump that fills every buffer up to the limit is cut there: a
	// goroutine not in it may be alive, so it is not said to have exited.
	d.dump = func(buf []byte) int {
		calls++
		const block = "goroutine 1 [running]:\nx\n\n"
		return copy(buf, strings.Repeat(block, len(buf)/len(block)+1))
	}
	calls = 0
	got, cut = d.stacksOf(1<<20, 3, []uint64{1, 99})
	assert.Equal(t, map[uint64]string{1: "goroutine 1 [running]:\nx"}, got)
	assert.True(t, cut)
	assert.Equal(t, "the goroutine that last beat is not in the part of the process's stacks the dump took", deadline.text(got, cut))
	assert.Equal(t, "the check's goroutine is not in the part of the process's stacks the dump took", stall.text(got, cut))
	assert.Equal(t, 5, calls, "64 KiB, doubled up to the 1 MiB limit")
	calls = 0
	d.stacksOf(1<<20, 3, []uint64{1, 5})
	assert.Equal(t, 1, calls, "after a cut, the next deadline dumps at the limit at once")

	// A dump cut inside the wanted goroutine's block ends that stack at
	// its last whole line, and says so: no half line, no half character.
	d, _ = testDumper()
	d.dump = func(buf []byte) int {
		text := strings.Repeat("goroutine 1 [running]:\nx\n\n", (len(buf)-200)/26) +
			"goroutine 7 [select]:\nmain.loop()\nmain.f" + strings.Repeat("é", 200) // past the buffer's end
		return copy(buf, text)
	}
	got, _ = d.stacksOf(64<<10, 3, []uint64{7})
	assert.Equal(t, map[uint64]string{7: "goroutine 7 [select]:\nmain.loop()" + stackCutDump}, got)

	// The first buffer is sized for the goroutines: one stop of the
	// world, not one per doubling from 64 KiB; and a dump that holds the
	// wanted stack whole is not taken again, full or not.
	need := strings.Repeat("goroutine 1 [running]:\nx\n\n", 10_000) + "goroutine 9 [select]:\ny\n" // 260,023 bytes
	fits := func(buf []byte) int { calls++; return copy(buf, need) }
	d, _ = testDumper()
	d.dump = fits
	calls = 0
	got, _ = d.stacksOf(maxDump, 20, []uint64{9})
	assert.Equal(t, "goroutine 9 [select]:\ny", got[9])
	assert.Equal(t, 3, calls, "20 goroutines guessed at 40 KiB: 64 KiB, 128, then 256 fits")
	d, _ = testDumper()
	d.dump = fits
	calls = 0
	d.stacksOf(maxDump, 10_000, []uint64{9})
	assert.Equal(t, 1, calls, "10,000 goroutines: a buffer for them at once")
	calls = 0
	d.stacksOf(maxDump, 3, []uint64{9})
	assert.Equal(t, 1, calls, "the last dump's size is the next one's start")
	d, _ = testDumper()
	d.dump = fits
	calls = 0
	got, _ = d.stacksOf(maxDump, 20, []uint64{1})
	assert.Equal(t, "goroutine 1 [running]:\nx", got[1])
	assert.Equal(t, 1, calls, "found whole in the first, full buffer")
}

// TestStacksOfPauseBound: a dump foreseen to stop the world for longer
// than maxDumpPause, from the last one's cost per goroutine, is not
// taken, and says so; a full dump is taken again in a larger buffer only
// while the pauses so far leave room for one more.
func TestStacksOfPauseBound(t *testing.T) {
	d, clk := testDumper()
	calls := 0
	d.dump = dumpOf(fakeDump, &calls)
	d.cost = time.Millisecond
	got, _ := d.stacksOf(maxDump, 501, []uint64{12, 1})
	notTaken := "not taken: a dump of the process's 501 goroutines would stop it for about 501ms (the bound is 500ms)"
	assert.Equal(t, map[uint64]string{12: notTaken, 1: notTaken}, got)
	assert.Zero(t, calls)
	d.dump = func(buf []byte) int {
		clk.advance(400 * time.Microsecond)
		return dumpOf(fakeDump, &calls)(buf)
	}
	got, _ = d.stacksOf(maxDump, 500, []uint64{12})
	assert.True(t, strings.HasPrefix(got[12], "goroutine 12 ["), "at the bound, a dump")
	assert.Equal(t, 1, calls)
	assert.Equal(t, 800*time.Nanosecond, d.cost, "the cost measured anew: 400 µs for 500 goroutines")

	// Each dump takes 300 ms on the test's clock: a full one is not
	// taken again, and what it holds is what there is.
	d, clk = testDumper()
	d.dump = func(buf []byte) int {
		calls++
		clk.advance(300 * time.Millisecond)
		return copy(buf, strings.Repeat("goroutine 1 [running]:\nx\n\n", len(buf)/26+1))
	}
	calls = 0
	got, cut := d.stacksOf(maxDump, 3, []uint64{1, 5})
	assert.Equal(t, map[uint64]string{1: "goroutine 1 [running]:\nx"}, got)
	assert.True(t, cut)
	assert.Equal(t, 1, calls, "300 ms spent: no room for another 300")
	assert.Equal(t, 100*time.Millisecond, d.cost, "300 ms for 3 goroutines")
}

// TestCutPartialStackAtALineEnd: a stack the dump ends inside, longer
// than maxStack, is cut at its last whole line within maxStack.
func TestCutPartialStackAtALineEnd(t *testing.T) {
	line := strings.Repeat("x", 98) + "\n" // 99 bytes
	got := cutPartialStack([]byte("goroutine 7 [select]:\n" + strings.Repeat(line, 300) + "xx"))
	require.True(t, strings.HasSuffix(got, stackCutDump))
	body := strings.TrimSuffix(got, stackCutDump)
	assert.LessOrEqual(t, len(got), maxStack)
	assert.Equal(t, "goroutine 7 [select]:\n"+strings.Repeat(line, (maxStack-len(stackCutDump)-22)/99-1)+strings.Repeat("x", 98), body,
		"whole lines only")
}

func TestCutStack(t *testing.T) {
	line := strings.Repeat("x", 99) + "\n" // 100 bytes
	long := strings.Repeat(line, 200)      // 20,000 bytes
	wantLong := strings.Repeat(line, 162) + strings.Repeat("x", 99) + stackCut
	for _, tc := range []struct {
		name, stack, want string
	}{
		{"short", "goroutine 1 [running]:\nmain.main()", "goroutine 1 [running]:\nmain.main()"},
		{"exactly 16 KiB", strings.Repeat("y", maxStack), strings.Repeat("y", maxStack)},
		{"longer: cut at a line end", long, wantLong},
		{"one line longer than 16 KiB: cut in it", strings.Repeat("z", maxStack+1), strings.Repeat("z", maxStack-len(stackCut)) + stackCut},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := cutStack([]byte(tc.stack))
			assert.Equal(t, tc.want, got)
			assert.LessOrEqual(t, len(got), maxStack)
		})
	}
	assert.Equal(t, "\n...the rest is cut: the stack is longer than 16 KiB", stackCut)
}

// stuckLoop is a watched loop that beats, then hangs on mu at its next
// turn until mu is released, then beats once more and returns without
// Stop. It sends its goroutine's id first.
func stuckLoop(w *Watchdog, mu *sync.Mutex, id chan<- uint64, turned chan<- struct{}) {
	id <- goroutineID()
	w.Beat()
	mu.Lock() // hangs here
	w.Beat()
	mu.Unlock()
	close(turned)
}

// takenStack waits for the stack of the i-th watchdog's deadline, which
// Status shows once it is taken, a moment after the verdict.
func takenStack(t *testing.T, s *Server, i int) string {
	t.Helper()
	eventually(t, func() bool { return s.Status().Watchdogs[i].Stack != "" }, "the deadline's stack")
	return s.Status().Watchdogs[i].Stack
}

// TestStuckGoroutineStack: a deadline's ERROR line and Status carry the
// stack of the goroutine that made the watchdog met, and only its stack,
// with its wait reason, until a Beat makes it met again; once that
// goroutine has returned without Stop, the next deadline says so.
func TestStuckGoroutineStack(t *testing.T) {
	defer goleak.VerifyNone(t)
	s, logs, clk := newFakeClockReadyServer(t)
	// The deadlines are passed by hand, each once the loop is where the
	// test wants it: a real one could pass again on a slow machine
	// between the Beat after the lock and the checks after it.
	w := s.Watch("reconcile", time.Hour)
	defer w.Stop()
	var mu sync.Mutex
	mu.Lock()
	ids, turned := make(chan uint64, 1), make(chan struct{})
	go stuckLoop(w, &mu, ids, turned)
	id := <-ids
	eventually(t, func() bool { return goroutineHeader(id) == fmt.Sprintf("goroutine %d [sync.Mutex.Lock]:", id) }, "the loop parked on the lock")

	clk.advance(2 * time.Hour)
	waitUnresponsive(t, s, "the hung loop's deadline")
	stack := takenStack(t, s, 0)
	header, frames, _ := strings.Cut(stack, "\n")
	assert.Equal(t, fmt.Sprintf("goroutine %d [sync.Mutex.Lock]:", id), header)
	assert.Contains(t, frames, "sync.(*Mutex).Lock(")
	assert.Contains(t, frames, "\ngithub.com/meshnode/health.stuckLoop(")
	assert.Contains(t, frames, "\ncreated by github.com/meshnode/health.TestStuckGoroutineStack in goroutine ")
	headers := 0
	for _, line := range strings.Split(stack, "\n") {
		if strings.HasPrefix(line, "goroutine ") {
			headers++
		}
	}
	assert.Equal(t, 1, headers, "that goroutine's stack alone")
	assert.False(t, strings.HasSuffix(stack, "\n"))
	assert.Equal(t, 1, logs.count(`level=ERROR msg="health: subsystem unresponsive" subsystem=reconcile timeout=1h0m0s stack=`+strconv.Quote(stack)),
		"the line carries the same text")

	ch := s.Changed()
	mu.Unlock()
	<-turned
	waitClosed(t, ch, 10*time.Second, "the Beat after the lock")
	require.NoError(t, s.Ready())
	assert.Empty(t, s.Status().Watchdogs[0].Stack, "met again: no stack")

	eventually(t, func() bool { return goroutineHeader(id) == "" }, "the loop's goroutine gone")
	clk.advance(2 * time.Hour)
	waitUnresponsive(t, s, "the deadline after the loop returned without Stop")
	assert.Equal(t, "the goroutine that last beat has exited", takenStack(t, s, 0))
	assert.Equal(t, 1, logs.count(`level=ERROR msg="health: subsystem unresponsive" subsystem=reconcile timeout=1h0m0s stack="the goroutine that last beat has exited"`))
}

// goroutineHeader returns the first line of goroutine id's stack, with its
// wait reason, or "" once it has exited.
func goroutineHeader(id uint64) string {
	buf := make([]byte, 1<<20)
	prefix := fmt.Sprintf("goroutine %d [", id)
	for _, g := range strings.Split(string(buf[:dumpAll(buf)]), "\n\n") {
		if strings.HasPrefix(g, prefix) {
			header, _, _ := strings.Cut(g, "\n")
			return header
		}
	}
	return ""
}

// TestStackBeforeTheFirstBeat: the first deadline, counted from Watch,
// finds no goroutine to show, and says so without a dump.
func TestStackBeforeTheFirstBeat(t *testing.T) {
	s, logs, clk := newFakeClockReadyServer(t)
	dumps := 0
	s.stackq.dumper.dump = dumpOf(fakeDump, &dumps)
	w := s.Watch("watch", 20*time.Millisecond)
	defer w.Stop()
	clk.advance(20 * time.Millisecond)
	require.Equal(t, uint64(1), s.Status().Watchdogs[0].Timeouts, "the first deadline")
	assert.Equal(t, "no goroutine has beaten yet", takenStack(t, s, 0))
	assert.Equal(t, 1, logs.count(`level=ERROR msg="health: subsystem unresponsive" subsystem=watch timeout=20ms stack="no goroutine has beaten yet"`))
	assert.Zero(t, dumps)
}

// lockWatchingDump has s dump with dump, counting the dumps and those
// taken while s.mu was held, and sending on dumped once each is done: a
// test waits on dumped rather than take the lock while a dump may run,
// so that only the Server's own holding of it can count.
func lockWatchingDump(s *Server, dump func([]byte) int) (dumps, locked *atomic.Int32, dumped <-chan struct{}) {
	dumps, locked = new(atomic.Int32), new(atomic.Int32)
	done := make(chan struct{}, 16)
	s.stackq.dumper.dump = func(buf []byte) int {
		dumps.Add(1)
		if s.mu.TryLock() {
			s.mu.Unlock()
		} else {
			locked.Add(1)
		}
		defer func() { done <- struct{}{} }()
		return dump(buf)
	}
	return dumps, locked, done
}

// TestStackOncePerDeadlineOutsideTheLock: a deadline dumps the goroutines
// once, whatever the Beats and probes around it, and never under the
// Server's lock; watchdogs whose deadlines pass together share one dump.
func TestStackOncePerDeadlineOutsideTheLock(t *testing.T) {
	s, _, clk := newFakeClockReadyServer(t)
	dumps, locked, dumped := lockWatchingDump(s, dumpAll)
	// The deadlines are passed by hand, so that no deadline passes early
	// on a slow machine.
	w := s.Watch("reconcile", time.Hour)
	for round := 1; round <= 3; round++ {
		for range 100 {
			w.Beat()
			serve(s.Handler(), "GET", "/readyz")
		}
		clk.advance(2 * time.Hour)
		require.ErrorIs(t, s.Ready(), ErrSubsystemUnresponsive)
		<-dumped
		takenStack(t, s, 0)
		assert.Equal(t, int32(round), dumps.Load(), "one dump per deadline")
		s.Status()
	}
	w.Stop()
	assert.Zero(t, locked.Load(), "no dump under the lock")

	// Two deadlines that the timer finds passed at once: one dump.
	a, b := s.Watch("a", time.Hour), s.Watch("b", time.Hour)
	defer a.Stop()
	defer b.Stop()
	a.Beat()
	b.Beat()
	dumps.Store(0)
	clk.advance(2 * time.Hour) // both an hour past their deadline
	<-dumped
	takenStack(t, s, 0)
	takenStack(t, s, 1)
	assert.Equal(t, int32(1), dumps.Load())
	st := s.Status().Watchdogs
	require.Len(t, st, 2)
	assert.True(t, strings.HasPrefix(st[0].Stack, "goroutine "), st[0].Stack)
	assert.Equal(t, st[0].Stack, st[1].Stack, "both beaten from this goroutine")
}

// BenchmarkStackCapture is what a deadline's stack costs with 10,000
// goroutines in the process, each parked ten frames deep on a channel: the
// dump of every goroutine, during which the world is stopped, and the
// whole capture, the dump and the search for the one goroutine.
func BenchmarkStackCapture(b *testing.B) {
	const goroutines = 10_000
	release := make(chan struct{})
	var parked sync.WaitGroup
	ids := make(chan uint64, 1)
	for i := range goroutines {
		parked.Add(1)
		go func() {
			defer parked.Done()
			parkDeep(10, func() {
				if i == goroutines/2 {
					ids <- goroutineID()
				}
				<-release
			})
		}()
	}
	id := <-ids
	defer func() {
		close(release)
		parked.Wait()
	}()

	b.Run("dump", func(b *testing.B) {
		b.ReportAllocs()
		buf := make([]byte, maxDump)
		n := 0
		for b.Loop() {
			n = dumpAll(buf)
		}
		b.ReportMetric(float64(n), "dump-bytes")
	})
	b.Run("capture", func(b *testing.B) {
		b.ReportAllocs()
		d := dumper{dump: dumpAll, clock: systemClock{}}
		for b.Loop() {
			if s, _ := d.stacksOf(maxDump, runtime.NumGoroutine(), []uint64{id}); !strings.HasPrefix(s[id], "goroutine ") {
				b.Fatal(s[id])
			}
		}
	})
}

// parkDeep calls park depth frames down, so that a parked goroutine's
// stack is as deep as an agent's loop's.
func parkDeep(depth int, park func()) {
	if depth == 0 {
		park()
		return
	}
	parkDeep(depth-1, park)
}

// holdDumps has s's dumps each send on inDump, then wait until release
// is closed, for a test that acts while a dump runs.
func holdDumps(s *Server) (inDump <-chan struct{}, release chan<- struct{}) {
	in, rel := make(chan struct{}, 4), make(chan struct{})
	s.stackq.dumper.dump = func(buf []byte) int {
		in <- struct{}{}
		<-rel
		return dumpAll(buf)
	}
	return in, rel
}

// TestVerdictDoesNotWaitForTheStack: a deadline's verdict is published
// while its stack is being taken, and so is that of a deadline passing
// meanwhile; a Beat during the dump recovers at once. The log still reads
// in the order of the changes: each ERROR line, with its stack, before the
// readiness line it caused, and the recovery after both.
func TestVerdictDoesNotWaitForTheStack(t *testing.T) {
	s, logs, clk := newFakeClockReadyServer(t)
	inDump, release := holdDumps(s)
	written := func(substr string) int { // what the sink has taken, without waiting for the rest
		return strings.Count(logs.LogBuffer.String(), substr)
	}
	// The deadlines are passed by hand: with real ones, a slow machine
	// could pass reconcile's again after its recovery, and log lines this
	// test does not expect. The first deadline's dump blocks until
	// release. The second deadline is a nanosecond after the first, so
	// that the dump it passes during takes only that long on the
	// Server's clock, and the next one is foreseen short enough to take.
	w := s.Watch("reconcile", time.Hour)
	defer w.Stop()
	other := s.Watch("watch", time.Hour)
	defer other.Stop()
	w.Beat()
	clk.advance(1)
	other.Beat()
	id := goroutineID()
	firstPassed := advanceAside(clk, time.Hour-1)
	select {
	case <-inDump:
	case <-time.After(10 * time.Second):
		t.Fatal("no dump within 10 s of the deadline")
	}
	select {
	case <-firstPassed:
	case <-time.After(10 * time.Second):
		t.Fatal("the deadline's timer waited for the dump")
	}
	require.ErrorIs(t, s.Ready(), ErrSubsystemUnresponsive, "published while the dump runs")
	st := s.Status().Watchdogs[0]
	assert.True(t, st.Overdue)
	assert.Empty(t, st.Stack, "no stack before it is taken")
	assert.Zero(t, written("health: subsystem unresponsive"), "the ERROR line waits for its stack")
	require.False(t, s.Status().Watchdogs[1].Overdue)

	// It returns at once: the goroutine dumping takes this stack too.
	secondPassed := advanceAside(clk, 1)
	select {
	case <-secondPassed:
	case <-time.After(10 * time.Second):
		t.Fatal("the second deadline waited for the first dump")
	}
	require.True(t, s.Status().Watchdogs[1].Overdue, "the second deadline, during the first dump")

	w.Beat()
	assert.False(t, s.Status().Watchdogs[0].Overdue, "recovered before Beat returned, the dump still running")
	close(release)
	<-inDump // the second deadline's dump, after the first
	assert.Equal(t, []string{
		`level=INFO msg="health: readiness changed" ready=false reason="data plane not configured"`,
		`level=INFO msg="health: readiness changed" ready=true after=…`,
		`level=WARN msg="health: readiness changed" ready=false reason="subsystem unresponsive"`,
		`level=INFO msg="health: readiness changed" ready=true after=…`,
		`level=ERROR msg="health: subsystem unresponsive" subsystem=reconcile timeout=1h0m0s stack=…`,
		`level=WARN msg="health: readiness changed" ready=false reason="subsystem unresponsive"`,
		`level=ERROR msg="health: subsystem unresponsive" subsystem=watch timeout=1h0m0s stack=…`,
		`level=INFO msg="health: subsystem responsive again" subsystem=reconcile after=…`,
	}, elideStacks(healthLines(logs)))
	stacks := 0
	for _, line := range healthLines(logs) {
		if m := quotedStack.FindStringSubmatch(line); m != nil {
			stack, err := strconv.Unquote(m[1])
			require.NoError(t, err)
			assert.True(t, strings.HasPrefix(stack, fmt.Sprintf("goroutine %d [", id)), stack)
			stacks++
		}
	}
	assert.Equal(t, 2, stacks, "each ERROR line with the stack of the goroutine that beat")
	st = s.Status().Watchdogs[0]
	assert.Empty(t, st.Stack, "met again before its stack was taken: none")
	assert.True(t, strings.HasPrefix(s.Status().Watchdogs[1].Stack, fmt.Sprintf("goroutine %d [", id)))
}

// TestStacksCoalesceAndWakeChanged: deadlines that pass while a dump runs
// share the next one, taken by the goroutine already dumping, never two
// at once; and a stack reaching Status wakes Changed, with the stack
// there to read.
func TestStacksCoalesceAndWakeChanged(t *testing.T) {
	s, logs, clk := newFakeClockReadyServer(t)
	inDump, release := make(chan struct{}, 4), make(chan struct{})
	var dumps, running, most atomic.Int32
	s.stackq.dumper.dump = func(buf []byte) int {
		n := running.Add(1)
		defer running.Add(-1)
		if n > most.Load() {
			most.Store(n)
		}
		dumps.Add(1)
		inDump <- struct{}{}
		<-release
		return dumpAll(buf)
	}
	// The deadlines are passed by hand: with real ones, a pause between a
	// Watch and its Beat on a slow machine would pass a deadline more.
	// The first deadline's dump blocks until release; the second advance
	// finds it dumping, and queues the three deadlines it passes for it.
	// Those come a nanosecond after the first, so that the dump they pass
	// during takes only that long on the Server's clock, and the next one
	// is foreseen short enough to take.
	first := s.Watch("first", time.Hour)
	defer first.Stop()
	first.Beat()
	clk.advance(1)
	for i := range 3 {
		w := s.Watch(fmt.Sprintf("worker-%d", i), time.Hour)
		defer w.Stop()
		w.Beat()
	}
	firstPassed := advanceAside(clk, time.Hour-1)
	<-inDump
	secondPassed := advanceAside(clk, 1)
	eventually(t, func() bool {
		s.stackq.mu.Lock()
		defer s.stackq.mu.Unlock()
		return len(s.stackq.pending) == 3
	}, "every deadline passed during the first dump, queued")
	<-secondPassed
	ch := s.Changed()
	close(release)
	waitClosed(t, ch, 10*time.Second, "the first stack reaching Status")
	assert.True(t, strings.HasPrefix(s.Status().Watchdogs[0].Stack, "goroutine "), "the stack there on the wake")
	eventually(t, func() bool {
		for _, w := range s.Status().Watchdogs {
			if w.Stack == "" {
				return false
			}
		}
		return true
	}, "every stack taken")
	<-firstPassed
	assert.Equal(t, int32(2), dumps.Load(), "the first deadline's dump, then one for the three")
	assert.Equal(t, int32(1), most.Load(), "one dump at a time")
	assert.Equal(t, 4, logs.count(`level=ERROR msg="health: subsystem unresponsive"`))
	assert.Equal(t, 4, logs.count(` stack="goroutine `), "each line with its stack")
}

// TestSlowDumpForgotten: a dump foreseen past the bound is not taken, and
// its foresight is forgotten, so that one slow dump (the dumping goroutine
// throttled) does not refuse every later deadline its stack.
func TestSlowDumpForgotten(t *testing.T) {
	d, _ := testDumper()
	calls := 0
	d.dump = dumpOf(fakeDump, &calls)
	d.cost = time.Second // one dump seemed to stop the world a second a goroutine
	got, _ := d.stacksOf(maxDump, 3, []uint64{12})
	assert.True(t, strings.HasPrefix(got[12], "not taken: "), got[12])
	assert.Zero(t, calls)
	got, _ = d.stacksOf(maxDump, 3, []uint64{12})
	assert.True(t, strings.HasPrefix(got[12], "goroutine 12 ["), "foreseen afresh, and taken: %s", got[12])
	assert.Equal(t, 1, calls)
}
