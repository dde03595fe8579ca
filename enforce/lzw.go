package enforce

import (
	"errors"
	"io"
)

// lzwWriter writes the compress coding of HTTP (RFC 9110 §8.4.1.1): the .Z format of the Unix
// compress program, LZW in block mode, here with codes of 9 to 13 bits (compress -b 13), which
// bounds a stream's dictionary to 8,192 entries. Go's compress/lzw is the
// variant of GIF and PDF (codes of at most 12 bits, an end code, no groups), which the compress
// program's readers do not take, and no maintained Go library writes this one.
//
// The format packs codes least significant bit first in groups of eight; a reader skips the
// rest of a group whenever the code width changes and after a CLEAR code. A flush therefore
// ends the current prefix with its code, then a CLEAR, which pads the group, so everything
// written so far can be decoded at once; the dictionary starts again after it.
type lzwWriter struct {
	w       io.Writer
	started bool // the header is written
	err     error
	keys    [lzwSlots]uint32     // the dictionary, open-addressed: prefix code << 8 | byte, plus one (0: empty)
	codes   [lzwSlots]uint16     // the code of each key
	ent     int                  // the current prefix's code, -1 before a byte
	free    int                  // the next code to assign
	bits    int                  // the code width
	maxcode int                  // the largest code of the width
	group   [lzwMaxBits + 2]byte // eight codes of the width (and room for the last one's spill)
	offset  int                  // bits used in group
	clear   bool                 // the code being written is CLEAR
}

const (
	lzwMaxBits  = 13
	lzwMaxCodes = 1 << lzwMaxBits
	lzwClear    = 256
	lzwFirst    = 257
	lzwSlots    = 1 << 14 // twice the largest dictionary
)

func newLZWWriter(w io.Writer) *lzwWriter {
	z := &lzwWriter{}
	z.Reset(w)
	return z
}

// Reset starts a new stream on w.
func (z *lzwWriter) Reset(w io.Writer) {
	z.w, z.started, z.err = w, false, nil
	z.restart()
}

// restart empties the dictionary and goes back to 9-bit codes.
func (z *lzwWriter) restart() {
	clear(z.keys[:])
	z.ent, z.free, z.bits, z.maxcode, z.offset = -1, lzwFirst, 9, 1<<9-1, 0
}

func (z *lzwWriter) Write(p []byte) (int, error) {
	if z.err != nil {
		return 0, z.err
	}
	if !z.started {
		z.started = true
		z.put([]byte{0x1f, 0x9d, 0x80 | lzwMaxBits}) // the magic, block mode, the widest code
	}
	for _, c := range p {
		if z.ent < 0 {
			z.ent = int(c)
			continue
		}
		key := (uint32(z.ent)<<8 | uint32(c)) + 1
		i := key * 2654435761 >> (32 - 14)
		for z.keys[i] != 0 && z.keys[i] != key {
			i = (i + 1) & (lzwSlots - 1)
		}
		if z.keys[i] == key {
			z.ent = int(z.codes[i])
			continue
		}
		z.output(z.ent)
		z.ent = int(c)
		if z.free < lzwMaxCodes {
			z.keys[i], z.codes[i] = key, uint16(z.free)
			z.free++
		} else {
			z.output(lzwClear)
			z.reset()
		}
	}
	if z.err != nil {
		return 0, z.err
	}
	return len(p), nil
}

// reset starts the dictionary again after a CLEAR code, keeping the current prefix.
func (z *lzwWriter) reset() {
	ent := z.ent
	z.restart()
	z.ent = ent
}

// output writes one code, then widens the codes when the next one may need it (after padding
// the group, as readers skip to the next group on a change of width); a CLEAR goes back to
// 9 bits.
func (z *lzwWriter) output(code int) {
	v, at := uint32(code)<<(z.offset%8), z.offset/8 // a code spans at most three bytes
	z.group[at] |= byte(v)
	z.group[at+1] |= byte(v >> 8)
	z.group[at+2] |= byte(v >> 16)
	z.offset += z.bits
	if z.offset == z.bits*8 {
		z.put(z.group[:z.bits])
		z.group, z.offset = [lzwMaxBits + 2]byte{}, 0
	}
	if code == lzwClear || z.free > z.maxcode {
		if z.offset > 0 {
			z.put(z.group[:z.bits])
			z.group, z.offset = [lzwMaxBits + 2]byte{}, 0
		}
		switch {
		case code == lzwClear:
			z.bits, z.maxcode = 9, 1<<9-1
		case z.bits < lzwMaxBits:
			z.bits++
			z.maxcode = 1<<z.bits - 1
			if z.bits == lzwMaxBits {
				z.maxcode = lzwMaxCodes
			}
		}
	}
}

func (z *lzwWriter) put(b []byte) {
	if z.err == nil {
		_, z.err = z.w.Write(b)
	}
}

// Flush writes everything given so far in a form a reader decodes at once.
func (z *lzwWriter) Flush() error {
	if z.err != nil || z.ent < 0 {
		return z.err
	}
	z.output(z.ent)
	z.output(lzwClear)
	z.restart()
	return z.err
}

// Close writes the last code and the bits of the last group.
func (z *lzwWriter) Close() error {
	if z.err != nil {
		return z.err
	}
	if !z.started {
		if _, err := z.Write(nil); err != nil {
			return err
		}
	}
	if z.ent >= 0 {
		z.output(z.ent)
		z.ent = -1
	}
	if z.offset > 0 {
		z.put(z.group[:(z.offset+7)/8])
		z.group, z.offset = [lzwMaxBits + 2]byte{}, 0
	}
	if z.err == nil {
		z.err = errLZWClosed
		return nil
	}
	return z.err
}

var errLZWClosed = errors.New("lzw: write after close")
