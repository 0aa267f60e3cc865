package kms

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"k8s.io/klog/v2"

	"github.com/diskplane/diskplane/pkg/emulator/iam"
)

// Config declares KMS keys: read from --kms-file at start, one key at a time
// through the admin API (PUT /kms/keys/<id>).
type Config struct {
	Keys []KeySpec `json:"keys"`
}

// KeySpec declares one symmetric encryption key. Declaring a key that
// exists changes its description, aliases, state and policy; its key
// material never changes.
type KeySpec struct {
	// ID is the key ID (a UUID in AWS; any 1 to 64 letters, digits and
	// dashes here); empty makes a new UUID.
	ID string `json:"id,omitempty"`
	// Aliases name the key, each "alias/<name>".
	Aliases []string `json:"aliases,omitempty"`
	// Description is free text.
	Description string `json:"description,omitempty"`
	// Enabled is the key's state; nil means enabled.
	Enabled *bool `json:"enabled,omitempty"`
	// Policy is the key policy; nil means KMS's default (the account's root
	// may do everything: each principal of the account may do what its
	// identity-based policies allow, as in AWS).
	Policy *iam.Policy `json:"policy,omitempty"`
}

// KeyInfo is what the admin API shows of a key (never its material).
type KeyInfo struct {
	ID           string      `json:"id"`
	ARN          string      `json:"arn"`
	Aliases      []string    `json:"aliases,omitempty"`
	Description  string      `json:"description,omitempty"`
	Enabled      bool        `json:"enabled"`
	Policy       *iam.Policy `json:"policy"`
	CreationDate time.Time   `json:"creationDate"`
}

// key is a key with its material: 256 bits for AES-GCM.
type key struct {
	ID           string      `json:"id"`
	Aliases      []string    `json:"aliases,omitempty"`
	Description  string      `json:"description,omitempty"`
	Enabled      bool        `json:"enabled"`
	Policy       *iam.Policy `json:"policy"`
	CreationDate time.Time   `json:"creationDate"`
	Material     []byte      `json:"material"`
}

// Store holds the region's keys. With a data directory it keeps them in
// kms-keys.json there (the emulator's stand-in for KMS's HSMs: a restarted
// emulator must still decrypt what it encrypted), else in memory.
type Store struct {
	region, account string
	path            string

	mu      sync.Mutex
	keys    map[string]*key
	aliases map[string]string // alias name → key ID
}

// stateFile is the keys' file in the data directory.
const stateFile = "kms-keys.json"

var (
	keyIDPattern = regexp.MustCompile(`^[A-Za-z0-9-]{1,64}$`)
	aliasPattern = regexp.MustCompile(`^alias/[A-Za-z0-9/_-]{1,250}$`)
)

// NewStore loads the keys kept in dataDir (empty: none, and nothing is
// kept) and declares cfg's keys.
func NewStore(region, account, dataDir string, cfg Config) (*Store, error) {
	s := &Store{region: region, account: account, keys: map[string]*key{}, aliases: map[string]string{}}
	if dataDir != "" {
		s.path = filepath.Join(dataDir, stateFile)
		if err := s.load(); err != nil {
			return nil, err
		}
	}
	for _, spec := range cfg.Keys {
		if _, err := s.Declare(spec); err != nil {
			return nil, err
		}
	}
	return s, nil
}

func (s *Store) load() error {
	b, err := os.ReadFile(s.path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("kms: %w", err)
	}
	var keys []*key
	if err := json.Unmarshal(b, &keys); err != nil {
		return fmt.Errorf("kms: %s: %w", s.path, err)
	}
	for _, k := range keys {
		if len(k.Material) != 32 {
			return fmt.Errorf("kms: %s: key %s has no 256-bit material", s.path, k.ID)
		}
		s.keys[k.ID] = k
		for _, a := range k.Aliases {
			s.aliases[a] = k.ID
		}
	}
	return nil
}

// saveLocked writes every key to the state file (atomically: a crash leaves
// the old file or the new one).
func (s *Store) saveLocked() error {
	if s.path == "" {
		return nil
	}
	keys := make([]*key, 0, len(s.keys))
	for _, k := range s.keys {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i].ID < keys[j].ID })
	b, err := json.MarshalIndent(keys, "", "  ")
	if err != nil {
		return err
	}
	tmp := s.path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("kms: %w", err)
	}
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, s.path)
	}
	if err != nil {
		return fmt.Errorf("kms: save the keys: %w", err)
	}
	return nil
}

// Declare creates a key, or changes the one with spec's ID, and returns it.
func (s *Store) Declare(spec KeySpec) (KeyInfo, error) {
	if spec.ID != "" && !keyIDPattern.MatchString(spec.ID) {
		return KeyInfo{}, fmt.Errorf("kms: key ID %q: want 1 to 64 letters, digits and dashes", spec.ID)
	}
	for _, a := range spec.Aliases {
		if !aliasPattern.MatchString(a) || strings.HasPrefix(a, "alias/aws/") {
			return KeyInfo{}, fmt.Errorf("kms: alias %q: want alias/<name> (alias/aws/ is AWS's)", a)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, a := range spec.Aliases {
		if owner, ok := s.aliases[a]; ok && owner != spec.ID {
			return KeyInfo{}, fmt.Errorf("kms: alias %s already names key %s", a, owner)
		}
	}
	k, exists := s.keys[spec.ID]
	if !exists {
		var err error
		if k, err = s.newKeyLocked(spec.ID); err != nil {
			return KeyInfo{}, err
		}
	}
	for _, a := range k.Aliases {
		delete(s.aliases, a)
	}
	k.Aliases, k.Description = slices.Clone(spec.Aliases), spec.Description
	for _, a := range k.Aliases {
		s.aliases[a] = k.ID
	}
	k.Enabled = spec.Enabled == nil || *spec.Enabled
	k.Policy = spec.Policy
	if k.Policy == nil {
		k.Policy = s.defaultPolicy()
	}
	if err := s.saveLocked(); err != nil {
		return KeyInfo{}, err
	}
	klog.V(2).InfoS("KMS key declared", "keyID", k.ID, "aliases", k.Aliases, "enabled", k.Enabled, "created", !exists)
	return s.info(k), nil
}

// newKeyLocked adds a key with fresh material; an empty id gets a UUID.
func (s *Store) newKeyLocked(id string) (*key, error) {
	if id == "" {
		id = uuid.NewString()
	}
	material := make([]byte, 32)
	if _, err := rand.Read(material); err != nil {
		return nil, err
	}
	k := &key{ID: id, Enabled: true, CreationDate: time.Now().UTC().Truncate(time.Second), Material: material, Policy: s.defaultPolicy()}
	s.keys[id] = k
	return k, nil
}

// defaultPolicy is the key policy KMS gives a key created without one.
func (s *Store) defaultPolicy() *iam.Policy {
	return &iam.Policy{Version: "2012-10-17", Statement: []iam.Statement{{
		Sid: "Enable IAM User Permissions", Effect: iam.EffectAllow,
		Principal: &iam.Principal{AWS: iam.StringList{iam.RootARN(s.account)}},
		Action:    iam.StringList{"kms:*"}, Resource: iam.StringList{"*"},
	}}}
}

// Keys lists every key.
func (s *Store) Keys() []KeyInfo {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]KeyInfo, 0, len(s.keys))
	for _, k := range s.keys {
		out = append(out, s.info(k))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

func (s *Store) info(k *key) KeyInfo {
	return KeyInfo{ID: k.ID, ARN: s.arn(k.ID), Aliases: slices.Clone(k.Aliases), Description: k.Description,
		Enabled: k.Enabled, Policy: k.Policy, CreationDate: k.CreationDate}
}

func (s *Store) arn(id string) string {
	return fmt.Sprintf("arn:aws:kms:%s:%s:key/%s", s.region, s.account, id)
}

// Reasons a key cannot be used.
var (
	// ErrKeyNotFound: no key has this ID, ARN or alias.
	ErrKeyNotFound = errors.New("key not found")
	// ErrKeyDisabled: the key exists and is disabled.
	ErrKeyDisabled = errors.New("key is disabled")
)

// resolveLocked finds a key by ID, key ARN, alias name or alias ARN.
func (s *Store) resolveLocked(ref string) (*key, error) {
	id := ref
	prefix := fmt.Sprintf("arn:aws:kms:%s:%s:", s.region, s.account)
	if rest, ok := strings.CutPrefix(ref, prefix); ok {
		id = rest
	}
	if strings.HasPrefix(id, "alias/") {
		id = s.aliases[id]
	} else {
		id = strings.TrimPrefix(id, "key/")
	}
	if k, ok := s.keys[id]; ok && id != "" {
		return k, nil
	}
	return nil, fmt.Errorf("%w: %s", ErrKeyNotFound, ref)
}

// Usable reports whether a key (by ID, ARN or alias) exists and is
// enabled: what EC2 checks of the KmsKeyId of a volume it encrypts.
func (s *Store) Usable(ref string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	k, err := s.resolveLocked(ref)
	if err != nil {
		return err
	}
	if !k.Enabled {
		return fmt.Errorf("%w: %s", ErrKeyDisabled, s.arn(k.ID))
	}
	return nil
}

// ciphertextVersion starts every ciphertext blob the emulator makes.
const ciphertextVersion = 1

// seal encrypts plaintext under k with AES-256-GCM, the encryption context
// bound in as additional data. The blob names the key, as KMS's does, so
// Decrypt needs no KeyId.
func seal(k *key, plaintext []byte, ctx map[string]string) ([]byte, error) {
	aead, err := newAEAD(k.Material)
	if err != nil {
		return nil, err
	}
	nonce := make([]byte, aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return nil, err
	}
	blob := append([]byte{ciphertextVersion, byte(len(k.ID))}, k.ID...)
	blob = append(blob, nonce...)
	return aead.Seal(blob, nonce, plaintext, contextBytes(ctx)), nil
}

// errBadCiphertext means a blob is not one this KMS made, or not with this
// encryption context.
var errBadCiphertext = errors.New("the ciphertext is not valid for this key and encryption context")

// blobKeyID reads which key a blob was sealed with.
func blobKeyID(blob []byte) (string, error) {
	if len(blob) < 2 || blob[0] != ciphertextVersion || len(blob) < 2+int(blob[1]) {
		return "", errBadCiphertext
	}
	return string(blob[2 : 2+int(blob[1])]), nil
}

// open decrypts a blob sealed with k under the encryption context ctx.
func open(k *key, blob []byte, ctx map[string]string) ([]byte, error) {
	aead, err := newAEAD(k.Material)
	if err != nil {
		return nil, err
	}
	body := blob[2+int(blob[1]):]
	if len(body) < aead.NonceSize()+aead.Overhead() {
		return nil, errBadCiphertext
	}
	plaintext, err := aead.Open(nil, body[:aead.NonceSize()], body[aead.NonceSize():], contextBytes(ctx))
	if err != nil {
		return nil, errBadCiphertext
	}
	return plaintext, nil
}

func newAEAD(material []byte) (cipher.AEAD, error) {
	block, err := aes.NewCipher(material)
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(block)
}

// contextBytes is an unambiguous encoding of an encryption context: its
// pairs sorted by key, each string with its length in front.
func contextBytes(ctx map[string]string) []byte {
	keys := make([]string, 0, len(ctx))
	for k := range ctx {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var out []byte
	for _, k := range keys {
		for _, s := range []string{k, ctx[k]} {
			out = binary.BigEndian.AppendUint32(out, uint32(len(s)))
			out = append(out, s...)
		}
	}
	return out
}
