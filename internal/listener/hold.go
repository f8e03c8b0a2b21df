package listener

import "time"

// After answering a request whose body the handler did not read, the room
// holds the connection as long as net/http would (SPEC v5), so that its
// client reconnects no sooner, but with no goroutine or buffer: closing at
// once let a flood of such requests reconnect as fast as it was answered,
// a storm several times a plain server's CPU.
//
// net/http (server.go's finishRequest and closeWriteAndWait, transfer.go's
// body.Close and readTrailer, internal/chunked.go), keep-alive off:
//
//   - no body, or a request that asks to close (HTTP/1.0, or "Connection:
//     close") and whose body is not chunked: closes at once;
//   - a declared body over maxDrain: shuts its side (a FIN), then closes
//     rstAvoidanceDelay later, unread: a linger;
//   - any other body: reads and discards it until it ends, its client
//     shuts its side, the connection fails, the body fails to parse,
//     maxDrain bytes have been read, or the read deadline passes
//     (headerTimeout from accept); then closes, at once if the body
//     ended, else after a linger (Go 1.27 on any failure, Go 1.26 only at
//     maxDrain: failedDrain, drainGivesUpAt);
//   - with Expect: 100-continue (never answered with 100: the handler
//     reads no body), Go 1.26's never lingers (expectLingers).
//
// maxDrain is net/http's maxPostHandlerReadBytes.
const maxDrain = 256 << 10

// rstAvoidanceDelay is how long net/http waits between shutting its side
// of a connection it gives up on and closing it. The kernel answers a
// close over unread bytes with a reset, which can destroy the answer
// before the client reads it: so every close after an answer here either
// has read what the client sent, or waits this long after a FIN.
const rstAvoidanceDelay = 500 * time.Millisecond

// holdKind is what the room does with a connection between its answer and
// its close.
type holdKind uint8

const (
	holdNone   holdKind = iota // close now
	holdDrain                  // read and discard its body (drain)
	holdLinger                 // its side shut; close after rstAvoidanceDelay
)

// holdFor is what follows the answer to req, whose first present bytes of
// body have arrived.
func holdFor(req *request, present []byte) (holdKind, drain) {
	d := drain{chunked: req.chunked, owed: req.length, noLinger: req.expect && !expectLingers}
	switch {
	case !req.chunked && (req.length == 0 || req.closes):
		return holdNone, d
	case req.length > maxDrain:
		return d.giveUp(holdLinger), d
	}
	return d.consume(present), d
}

// drain is what remains of a body the room reads and discards: a declared
// length, or a chunked body, followed as net/http's chunked reader does,
// with its caps, without keeping a byte.
type drain struct {
	chunked  bool
	noLinger bool  // Expect: 100-continue, before Go 1.27
	owed     int64 // bytes of Content-Length, or of the current chunk, still to come
	read     int64 // body bytes read (chunk data, not framing), against drainGivesUpAt
	state    chunkState
	line     int    // bytes of the current chunk-size line, or of the trailer
	digits   int    // hex digits of the current chunk size
	size     uint64 // the current chunk size, as read so far
	excess   int64  // framing beyond net/http's allowance, against maxChunkExcess
	// In a chunk-size line: a CR seen (which must come last), white space
	// or ';' seen, and a byte net/http refuses, found once the line ends.
	cr, space, extension, bad bool
	lastCR                    bool   // the byte after a chunk's data was a CR
	tail                      uint32 // the trailer's last four bytes
}

type chunkState uint8

const (
	chunkSize    chunkState = iota // in a chunk-size line
	chunkData                      // in a chunk's owed bytes
	chunkCR                        // the first byte after a chunk's data
	chunkLF                        // the second
	chunkTrailer                   // in the trailer, after the last chunk
	chunkEnded
	chunkFailed
)

// net/http's caps on a chunked body: a chunk-size line (maxLineLength), the
// framing allowed beyond 16 bytes a chunk and twice its data, and the
// trailer (its reader's buffer, which must hold the trailer's end).
const (
	maxChunkLine   = 4096
	maxChunkExcess = 16 << 10
	maxTrailer     = 4096
)

// giveUp is what follows once net/http stops reading short of the body's
// end: kind, but no linger where net/http has none.
func (d *drain) giveUp(kind holdKind) holdKind {
	if kind == holdLinger && d.noLinger {
		return holdNone
	}
	return kind
}

// consume takes p, the body's next bytes, and says what follows: holdNone
// once the body has ended, holdDrain while it has not, else what net/http
// does when it gives up (its cap, a malformed chunk).
func (d *drain) consume(p []byte) holdKind {
	for len(p) > 0 && d.state < chunkEnded {
		if !d.chunked || d.state == chunkData {
			n := min(int64(len(p)), d.owed)
			d.owed, d.read, p = d.owed-n, d.read+n, p[n:]
			switch {
			case d.read >= drainGivesUpAt:
				return d.giveUp(holdLinger)
			case d.owed == 0 && !d.chunked:
				return holdNone
			case d.owed == 0:
				d.state = chunkCR
			}
			continue
		}
		d.state = d.next(p[0])
		p = p[1:]
	}
	switch d.state {
	case chunkEnded:
		return holdNone
	case chunkFailed:
		return d.giveUp(failedDrain)
	}
	return holdDrain
}

// next reads c, a byte of a chunked body's framing, as net/http does: a
// size line is hex digits, then white space or an extension from ';',
// then CRLF, checked once the line is whole; a chunk's data ends in CRLF;
// after the last chunk, of size 0, comes CRLF, or a trailer ending in a
// blank line within maxTrailer.
func (d *drain) next(c byte) chunkState {
	switch d.state {
	case chunkCR:
		d.lastCR = c == '\r'
		return chunkLF
	case chunkLF:
		if !d.lastCR || c != '\n' {
			return chunkFailed
		}
		return chunkSize
	case chunkTrailer:
		d.line++
		d.tail = d.tail<<8 | uint32(c)
		switch {
		case d.line == 2 && d.tail&0xffff == 0x0d0a, d.tail == 0x0d0a0d0a:
			return chunkEnded
		case d.line >= maxTrailer:
			return chunkFailed
		}
		return chunkTrailer
	}
	if c == '\n' {
		return d.endSizeLine()
	}
	d.line++
	switch {
	case d.line >= maxChunkLine:
		return chunkFailed
	case d.cr:
		d.bad = true // a CR not last
	case c == '\r':
		d.cr = true
	case d.extension:
	case c == ';':
		d.bad = d.bad || d.space
		d.extension = true
	case c == ' ' || c == '\t':
		d.space = true
	case d.space || d.digits == 16 || unhex(c) < 0:
		d.bad = true
	default:
		d.size = d.size<<4 | uint64(unhex(c)) // 16 digits at most: no overflow
		d.digits++
	}
	return chunkSize
}

// endSizeLine ends a chunk-size line at its LF, and counts its framing
// against net/http's allowance, in its int64 arithmetic, which wraps for a
// size past 2⁶³ and so fails such a chunk at once.
func (d *drain) endSizeLine() chunkState {
	ok := d.cr && d.digits > 0 && !d.bad
	d.excess = max(0, d.excess+int64(d.line)+1-(16+2*int64(d.size)))
	d.owed, d.size = int64(min(d.size, 1<<62)), 0 // 2⁶² hits the cap as surely as more
	d.line, d.cr, d.extension, d.space, d.bad, d.digits = 0, false, false, false, false, 0
	switch {
	case !ok || d.excess > maxChunkExcess:
		return chunkFailed
	case d.owed == 0:
		return chunkTrailer
	}
	return chunkData
}

func unhex(c byte) int {
	switch {
	case '0' <= c && c <= '9':
		return int(c - '0')
	case 'a' <= c && c <= 'f':
		return int(c-'a') + 10
	case 'A' <= c && c <= 'F':
		return int(c-'A') + 10
	}
	return -1
}
