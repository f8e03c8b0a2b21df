package listener

import "time"

// What net/http does with a connection after answering a request whose
// body the handler did not read, keep-alive being off, is what the room
// does in its place (SPEC v5, "One way in"): hold the connection as long
// as a plain server would, so that its client reconnects no sooner, but
// without a goroutine or a buffer of its own. Closing at once instead, as
// the slots' guards do, let a flood of such requests reconnect as fast as
// it was answered: a storm several times a plain server's CPU.
//
// net/http (server.go's finishRequest, transfer.go's body.Close, and
// closeWriteAndWait) holds a connection so:
//
//   - no body, or a request that asks to close (HTTP/1.0, or "Connection:
//     close") and whose body is not chunked: closed at once;
//   - a declared body over maxDrain: answered, then its sending side shut
//     (a FIN), then closed rstAvoidanceDelay later, unread;
//   - any other body: read and discarded until it ends, its client shuts
//     its side, the connection fails, maxDrain bytes have been read, or
//     the read deadline passes (headerTimeout from accept); then closed,
//     at once when the body ended, else (from Go 1.27 on any failure, and
//     in Go 1.26 only at maxDrain) after the same FIN and delay.
//
// An Expect: 100-continue is never answered with 100, since the handler
// reads no body, so it is held as the body it announces.

// maxDrain is net/http's maxPostHandlerReadBytes: the most body it reads
// after an answer before it gives up on the connection.
const maxDrain = 256 << 10

// rstAvoidanceDelay is how long net/http waits between shutting its side
// of a connection it gives up on and closing it, so that the client reads
// the answer before the reset the close may send.
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
// body have already arrived.
func holdFor(req *request, present []byte) (holdKind, drain) {
	d := drain{chunked: req.chunked, owed: req.length}
	switch {
	case !req.chunked && (req.length == 0 || req.closes):
		return holdNone, d
	case req.length > maxDrain:
		return holdLinger, d
	}
	return d.consume(present), d
}

// drain is what remains of a body the room reads and discards: a declared
// length, or a chunked body, which it follows as net/http's chunked
// reader does, without keeping a byte of it.
type drain struct {
	chunked bool
	owed    int64 // bytes of Content-Length, or of the current chunk, still to come
	read    int64 // body bytes read, against maxDrain
	state   chunkState
	line    int  // bytes of the current chunk-size or trailer line
	digits  int  // hex digits of the current chunk size
	cr      bool // the line has a CR, which must come last
	// In a chunk-size line, past white space or ';'.
	space, extension bool
}

type chunkState uint8

const (
	chunkSize    chunkState = iota // in a chunk-size line
	chunkData                      // in a chunk's owed bytes
	chunkCR                        // the CR after a chunk's data
	chunkLF                        // the LF after it
	chunkTrailer                   // in the trailer, after the last chunk
	chunkEnded
	chunkFailed
)

// maxChunkLine is net/http's cap on a chunk-size line, past which its
// reader fails.
const maxChunkLine = 4096

// consume takes p, the body's next bytes, and says what follows: holdNone
// once the body has ended, holdDrain while it has not, and, when it fails
// or reaches maxDrain, whatever net/http does then (failedDrain).
func (d *drain) consume(p []byte) holdKind {
	if !d.chunked {
		d.owed -= int64(len(p))
		if d.owed <= 0 {
			return holdNone
		}
		return holdDrain
	}
	for len(p) > 0 && d.state < chunkEnded {
		if d.state == chunkData {
			n := min(int64(len(p)), d.owed)
			d.owed, d.read, p = d.owed-n, d.read+n, p[n:]
			if d.owed == 0 {
				d.state = chunkCR
			}
			continue
		}
		d.state = d.next(p[0])
		p = p[1:]
	}
	switch {
	case d.state == chunkEnded:
		return holdNone
	case d.state == chunkFailed:
		return failedDrain
	case d.read >= drainGivesUpAt:
		return holdLinger
	}
	return holdDrain
}

// next reads c, a byte of framing, as net/http's chunked reader does: a
// size line is hex digits, then white space or an extension from ';'
// (ignored), then CRLF, with no other CR; a chunk's data ends in CRLF; the
// last chunk, of size 0, is followed by trailer lines up to an empty one.
func (d *drain) next(c byte) chunkState {
	switch d.state {
	case chunkCR, chunkLF:
		if c != "\r\n"[d.state-chunkCR] {
			return chunkFailed
		}
		if d.state == chunkLF {
			return chunkSize
		}
		return chunkLF
	case chunkTrailer:
		if c != '\n' {
			d.cr = d.cr || d.line == 0 && c == '\r'
			d.line++
			return chunkTrailer
		}
		ended := d.line == 0 || d.line == 1 && d.cr
		d.line, d.cr = 0, false
		if ended {
			return chunkEnded
		}
		return chunkTrailer
	}
	if c == '\n' {
		return d.endSizeLine()
	}
	d.line++
	switch {
	case d.line >= maxChunkLine || d.cr:
		return chunkFailed
	case c == '\r':
		d.cr = true
	case d.extension:
	case c == ';' && !d.space:
		d.extension = true
	case c == ' ' || c == '\t':
		d.space = true
	case d.space || d.digits == 16 || unhex(c) < 0:
		return chunkFailed
	default:
		// Saturated: a chunk of 2⁵⁸ bytes is drained to maxDrain as
		// surely as a larger one, where net/http's uint64 would not
		// overflow either.
		d.owed = min(d.owed, 1<<58)<<4 | int64(unhex(c))
		d.digits++
	}
	return chunkSize
}

// endSizeLine ends a chunk-size line at its LF.
func (d *drain) endSizeLine() chunkState {
	ok := d.cr && d.digits > 0
	d.line, d.cr, d.extension, d.space, d.digits = 0, false, false, false, 0
	switch {
	case !ok:
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
