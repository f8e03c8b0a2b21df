package health

import (
	"bytes"
	"fmt"
	"runtime"
	"sync/atomic"
)

// The texts a deadline's stack attribute carries when there is no stack to
// show. They are constants, so that an alert or a grep can match them.
const (
	// stackExited: the goroutine that last made the watchdog met has
	// returned, and the watchdog was not stopped: a loop that ended
	// without Stop, an exit SetSubsystemStopped should have reported.
	stackExited = "the goroutine that last beat has exited"
	// stackNoBeat: the first deadline, counted from Watch, passed before
	// any Beat, so no goroutine is known to be the loop's.
	stackNoBeat = "no goroutine has beaten yet"
	// stackNotFound: the goroutines' dump was cut at maxDump before the
	// goroutine's turn came; it may or may not be alive.
	stackNotFound = "the goroutine that last beat is not in the first 64 MiB of the process's stacks"
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

// maxDumpGoroutines is the most goroutines a deadline dumps: the pause
// grows with their number (docs/performance.md measures it), and a process
// with more is likely one whose goroutines pile up behind the very lock the
// loop hangs on, where a pause of seconds would cost the node its probes on
// top. Past it the stack says so instead.
const maxDumpGoroutines = 20_000

// dumpPerGoroutine sizes a first dump's buffer: a goroutine of an agent
// prints in one or two KiB. Too small a guess costs another stop of the
// world for every doubling, too big a one only memory, for a moment.
const dumpPerGoroutine = 2 << 10

// maxDump bounds the buffer that takes every goroutine's stack. The
// runtime walks every goroutine however small the buffer, so this bounds
// the memory, not the pause.
const maxDump = 64 << 20

// dumpHint sizes the next dump's buffer from the last dump, so that it is
// usually taken at the first try: each try stops the world.
var dumpHint atomic.Int64

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
// at maxStack; stackNoBeat for id 0; stackExited for a goroutine that no
// longer exists (ids are never reused); stackNotFound when the dump was
// cut at limit before it; and, with more than maxDumpGoroutines
// goroutines, a text saying it was not taken.
//
// It takes every goroutine's stack in one dump, which stops the world for
// as long as the runtime takes to print them all, so the deadline timer
// calls it once per deadline, for every watchdog that passed one at that
// moment, and never under the Server's lock. The dump is dropped before
// it returns; the stacks are copies.
func stacksOf(dump func([]byte) int, limit, goroutines int, ids []uint64) map[uint64]string {
	stacks := make(map[uint64]string, len(ids))
	need := 0
	for _, id := range ids {
		if id == 0 {
			stacks[id] = stackNoBeat
		} else {
			stacks[id] = "" // wanted
			need++
		}
	}
	if need == 0 {
		return stacks
	}
	if goroutines > maxDumpGoroutines {
		for id, s := range stacks {
			if s == "" {
				stacks[id] = fmt.Sprintf("not taken: the process has %d goroutines, and a dump of them all "+
					"would stop it for too long (the bound is %d)", goroutines, maxDumpGoroutines)
			}
		}
		return stacks
	}
	buf, cut := takeDump(dump, limit, goroutines)
	for len(buf) > 0 && need > 0 {
		var block []byte
		var whole bool
		block, buf, whole = bytes.Cut(buf, []byte("\n\n"))
		id := headerID(block)
		if s, wanted := stacks[id]; wanted && s == "" && id != 0 {
			if !whole && cut {
				stacks[id] = cutPartialStack(block) // the dump ends inside it
			} else {
				stacks[id] = cutStack(bytes.TrimSuffix(block, []byte("\n")))
			}
			need--
		}
	}
	for id, s := range stacks {
		switch {
		case s != "":
		case cut:
			stacks[id] = stackNotFound
		default:
			stacks[id] = stackExited
		}
	}
	return stacks
}

// takeDump returns every goroutine's stack, growing the buffer until it
// holds them all or reaches limit (maxDump), and whether it was cut there.
// The first buffer is the last dump's size or the guess for goroutines,
// whichever is larger.
func takeDump(dump func([]byte) int, limit, goroutines int) ([]byte, bool) {
	size := min(max(int(dumpHint.Load()), goroutines*dumpPerGoroutine, 64<<10), limit)
	for {
		buf := make([]byte, size)
		n := dump(buf)
		if n < len(buf) {
			dumpHint.Store(int64(n + n/4)) // room for some growth, and shrinks with the process
			return buf[:n], false
		}
		if size >= limit {
			dumpHint.Store(int64(limit)) // the next deadline dumps once, not after every doubling
			return buf[:n], true
		}
		size = min(2*size, limit)
	}
}

// dumpAll is the dump stacksOf takes outside tests: runtime.Stack of
// every goroutine.
func dumpAll(buf []byte) int { return runtime.Stack(buf, true) }

// cutPartialStack returns the stack a cut dump ends inside: to its last
// whole line, saying so, so that no line (or character) is half there.
func cutPartialStack(stack []byte) string {
	if i := bytes.LastIndexByte(stack, '\n'); i >= 0 {
		stack = stack[:i]
	}
	return cutStack(stack[:min(len(stack), maxStack-len(stackCutDump))]) + stackCutDump
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
