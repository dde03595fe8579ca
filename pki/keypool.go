package pki

import (
	"crypto/rand"
	"crypto/rsa"
	"fmt"
)

// RSAKeys hands out RSA keys made ahead of need. An RSA key takes tens of milliseconds to make;
// callers that must have one inside a database write transaction (which on SQLite holds the one
// writer every account shares) take it before the transaction starts, and give back a key the
// transaction turned out not to need, so the next caller gets it for free. A key in the pool was
// never used or shown, so any caller may take it.
type RSAKeys struct {
	bits int
	pool chan *rsa.PrivateKey
}

// NewRSAKeys returns a pool of keys of bits, holding at most size unused ones.
func NewRSAKeys(bits, size int) *RSAKeys {
	return &RSAKeys{bits: bits, pool: make(chan *rsa.PrivateKey, size)}
}

// Take returns an unused key from the pool, or makes one when the pool is empty.
func (k *RSAKeys) Take() (*rsa.PrivateKey, error) {
	select {
	case key := <-k.pool:
		return key, nil
	default:
	}
	key, err := rsa.GenerateKey(rand.Reader, k.bits)
	if err != nil {
		return nil, fmt.Errorf("pki: generating an RSA-%d key: %w", k.bits, err)
	}
	return key, nil
}

// Put gives back a key that was taken but never used or shown; it is dropped when the pool is
// full or it has another size.
func (k *RSAKeys) Put(key *rsa.PrivateKey) {
	if key == nil || key.N.BitLen() != k.bits {
		return
	}
	select {
	case k.pool <- key:
	default:
	}
}
