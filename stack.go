package health

import (
	"bytes"
	"fmt"
	"runtime"
	"time"
)

// The texts a stack attribute carries when there is no stack to show.
// They are constants, so that an alert or a grep can match them.
const (
	// stackExited: the goroutine that last made the watchdog met has
	// returned, and the watchdog was not stopped: a loop that ended
	// without Stop, an exit SetSubsystemStopped should have reported.
	stackExited = "the goroutine that last beat has exited"
	// stackNoBeat: the first deadline, counted from Watch, passed before
	// any Beat, so no goroutine is known to be the loop's.
	stackNoBeat = "no goroutine has beaten yet"
	// stackBeatWhileDisabled: the loop beat, but only while its
	// watchdog was disabled, when a Beat records nothing (see retune).
	stackBeatWhileDisabled = "no goroutine is known: the loop beat only while its watchdog was disabled"
	// stackNotFound: the goroutines' dump was cut (at maxDump, or by
	// maxDumpPause) before the goroutine's turn came; it may or may not
	// be alive.
	stackNotFound = "the goroutine that last beat is not in the part of the process's stacks the dump took"
	// stackCheckExited, stackCheckNotFound: the same of a stalled
	// check's goroutine, which can have exited only if the check
	// returned and its poller ended before the dump.
	stackCheckExited   = "the check's goroutine has exited"
	stackCheckNotFound = "the check's goroutine is not in the part of the process's stacks the dump took"
)

// maxStack bounds a stack in the log and in Status: a loop's stack is a
// few KiB, and the runtime prints at most 100 frames, but frames of long
// generic names could make the line the largest the package writes at the
// very moment the log may be slow.
const maxStack = 16 << 10

// stackCut ends a stack cut at maxStack, at a line end.
const stackCut = "\n...the rest is cut: the stack is longer than 16 KiB"

// stackCutDump ends a stack the 64 MiB dump ended inside, at a line end.
const stackCutDump = "\n...the rest is cut: the dump of every stack ended inside this one"

// maxDumpPause bounds the stop of the world a deadline's stacks cost: each
// dump stops it for as long as the runtime takes to print every goroutine,
// and meanwhile no probe is answered and no other deadline reported. Half
// a second keeps a deadline that passes during it within the second Watch
// promises, and a probe within its timeout. The pause is foreseen from the
// last dump's cost per goroutine, which grows with their depth and with a
// CPU limit's throttling, so a process too big to dump within it gets a
// line that says so instead, and a dump is grown and taken again only
// while the pauses so far leave room for one more.
const maxDumpPause = 500 * time.Millisecond

// firstDumpCost foresees a first dump's pause, per goroutine, before any
// has been measured: twice the 20 µs measured for goroutines 13 frames
// deep (docs/performance.md), since an agent's are often deeper.
const firstDumpCost = 40 * time.Microsecond

// dumpPerGoroutine sizes a first dump's buffer: a goroutine of an agent
// prints in one or two KiB. Too small a guess costs another stop of the
// world for every doubling, too big a one only memory, for a moment.
const dumpPerGoroutine = 2 << 10

// maxDump bounds the buffer that takes every goroutine's stack. The
// runtime walks every goroutine however small the buffer, so this bounds
// the memory, not the pause.
const maxDump = 64 << 20

// dumper takes every goroutine's stack for a Server's ERROR lines. It
// keeps its last dump's pause per goroutine, to foresee the next one's
// (maxDumpPause), and its size, so that the next is usually taken at the
// first try: each try stops the world. Each Server has its own, measured
// on its own clock, so that nothing one Server (or a test) measures
// reaches another. One goroutine at a time uses it: the one stackQueue
// lets dump.
type dumper struct {
	dump func([]byte) int // dumpAll outside tests, whose dumps may count or hold the calls
	// clock times each dump: the system's, as a dump's pause is real time
	// whatever clock the Server's deadlines follow (a test's moves while
	// a dump runs, which would count as its pause).
	clock clock
	cost  time.Duration // the last dump's pause per goroutine; 0 before the first
	hint  int           // the next dump's buffer size, from the last dump; 0 before the first
}

// goroutineID returns the id of the calling goroutine, as the header of
// its stack gives it. It costs a walk of the caller's stack, so only a
// Beat that makes its watchdog met calls it (see Watchdog.goid).
func goroutineID() uint64 {
	var buf [64]byte // "goroutine 18446744073709551615 [" fits
	n := runtime.Stack(buf[:], false)
	return headerID(buf[:n])
}

// headerID parses the id of a stack's header, "goroutine 7 [...]:", and
// returns 0, which no goroutine has, for anything else.
func headerID(stack []byte) uint64 {
	rest, ok := bytes.CutPrefix(stack, []byte("goroutine "))
	if !ok {
		return 0
	}
	var id uint64
	i := 0
	for ; i < len(rest) && isDigit(rest[i]); i++ {
		id = id*10 + uint64(rest[i]-'0')
	}
	if i == 0 || i == len(rest) || rest[i] != ' ' {
		return 0
	}
	return id
}

// stacksOf returns, for each goroutine id given, its stack as the runtime
// prints it (runtime.Stack's format: the header with its wait reason, and
// the minutes waited once it has waited a minute, then its frames), cut
// at maxStack, and reports whether the dump was cut before its end. A
// goroutine the dump did not hold has no stack: it no longer exists (ids
// are never reused), or, when the dump was cut, it may be past its end;
// the caller says which in its own words. When a dump is foreseen to stop
// the world for longer than maxDumpPause, none is taken, and each id gets
// a text saying so.
//
// One dump serves every stack wanted meanwhile (stackQueue), never under
// the Server's lock (see maxDumpPause for its cost). The dump is dropped
// before it returns; the stacks are copies.
func (d *dumper) stacksOf(limit, goroutines int, ids []uint64) (stacks map[uint64]string, cut bool) {
	stacks = make(map[uint64]string, len(ids))
	for _, id := range ids {
		stacks[id] = "" // wanted
	}
	cost := d.cost
	if cost == 0 {
		cost = firstDumpCost
	}
	if pause := time.Duration(goroutines) * cost; pause > maxDumpPause {
		// Forgotten, so that the next dump is foreseen afresh: one slow
		// dump (a throttled moment) must not refuse every later one.
		d.cost = 0
		for id := range stacks {
			stacks[id] = fmt.Sprintf("not taken: a dump of the process's %d goroutines would stop it for about %v (the bound is %v)",
				goroutines, pause.Round(time.Millisecond), maxDumpPause)
		}
		return stacks, false
	}
	cut = d.takeDump(limit, goroutines, stacks)
	for id, s := range stacks {
		if s == "" {
			delete(stacks, id)
		}
	}
	return stacks, cut
}

// takeDump dumps every goroutine's stack and fills in the wanted stacks
// (those empty in stacks) from it, and reports whether the dump was cut
// before its end. A dump that fills its buffer is taken again in a larger
// one only while a wanted stack is not yet whole in it and the pauses so
// far leave room for one more within maxDumpPause: goroutines print in
// the order they were made, so a loop started at bring-up is usually in
// the first buffer, found at the first stop of the world. The buffer is
// the last dump's size or the guess for goroutines, whichever is larger,
// and grows to what the part printed says the whole needs.
func (d *dumper) takeDump(limit, goroutines int, stacks map[uint64]string) (cut bool) {
	size := min(max(d.hint, goroutines*dumpPerGoroutine, 64<<10), limit)
	var spent time.Duration
	for {
		buf := make([]byte, size)
		start := d.clock.now()
		n := d.dump(buf)
		took := d.clock.now().Sub(start)
		spent += took
		d.cost = took / time.Duration(max(goroutines, 1))
		full := n == len(buf)
		grow := full && size < limit && spent+took <= maxDumpPause
		if pickStacks(stacks, buf[:n], full, !grow) == 0 || !grow {
			if full {
				d.hint = size // the next deadline dumps once at this size
			} else {
				d.hint = n + n/4 // room for some growth, and shrinks with the process
			}
			return full
		}
		printed := max(1, bytes.Count(buf[:n], []byte("\n\ngoroutine ")))
		size = min(limit, max(2*size, size/printed*goroutines*5/4))
	}
}

// pickStacks fills in the wanted stacks (empty in stacks) from dump, and
// returns how many are still wanted. In a full dump, the last block may
// be cut inside; it is taken, to its last whole line, only when final.
func pickStacks(stacks map[uint64]string, dump []byte, full, final bool) (need int) {
	for _, s := range stacks {
		if s == "" {
			need++
		}
	}
	for len(dump) > 0 && need > 0 {
		var block []byte
		var whole bool
		block, dump, whole = bytes.Cut(dump, []byte("\n\n"))
		id := headerID(block)
		if s, wanted := stacks[id]; !wanted || s != "" || id == 0 {
			continue
		}
		switch {
		case whole || !full:
			stacks[id] = cutStack(bytes.TrimSuffix(block, []byte("\n")))
		case final:
			stacks[id] = cutPartialStack(block) // the dump ends inside it
		default:
			continue // taken whole from the next, larger dump
		}
		need--
	}
	return need
}

// dumpAll is the dump stacksOf takes outside tests: runtime.Stack of
// every goroutine.
func dumpAll(buf []byte) int { return runtime.Stack(buf, true) }

// cutPartialStack returns the stack a cut dump ends inside: to its last
// whole line within maxStack, saying so, so that no line (or character)
// is half there.
func cutPartialStack(stack []byte) string {
	stack = stack[:min(len(stack), maxStack-len(stackCutDump))]
	if i := bytes.LastIndexByte(stack, '\n'); i >= 0 {
		stack = stack[:i]
	}
	return string(stack) + stackCutDump
}

// cutStack returns stack as a string of at most maxStack bytes, cut at a
// line end and saying so when it is longer.
func cutStack(stack []byte) string {
	if len(stack) <= maxStack {
		return string(stack)
	}
	keep := stack[:maxStack-len(stackCut)]
	if i := bytes.LastIndexByte(keep, '\n'); i >= 0 {
		keep = keep[:i]
	}
	return string(keep) + stackCut
}
