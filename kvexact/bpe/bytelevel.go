package bpe

// byteLevel maps each byte to the printable rune GPT-2's byte-level BPE
// uses for it: printable Latin-1 bytes map to themselves, the other 68 to
// U+0100 onwards, in byte order.
var byteLevel = func() (m [256]rune) {
	n := 0
	for b := 0; b < 256; b++ {
		if (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF) {
			m[b] = rune(b)
		} else {
			m[b] = rune(256 + n)
			n++
		}
	}
	return m
}()
