//go:build moto

package moto

import (
	"bytes"
	"errors"
	"testing"

	"github.com/diskplane/diskplane/pkg/cloud/datakeys"
	"github.com/diskplane/diskplane/pkg/testutil/motoserver"
)

// TestWorkloadIdentity runs workload identity's STS and KMS calls against
// moto's: the controller's GenerateDataKeyWithoutPlaintext and ReEncrypt
// (for a restore) bound to each volume's encryption context, and a pod's
// AssumeRoleWithWebIdentity followed by Decrypt with the session's
// credentials. The binding holds in moto's KMS too: a key asked for with
// another volume's context does not decrypt. moto verifies neither the web
// identity token nor the role's trust policy, and stores key policies
// without evaluating them, so every refusal of a tenant is proven against
// ec2-emulator only (pkg/cloud/datakeys, make test-vm-identity).
func TestWorkloadIdentity(t *testing.T) {
	account := motoserver.Shared(t).NewAccount(t)
	ctx := t.Context()
	keyARN, err := account.CreateKey(ctx, "alias/volumes")
	if err != nil {
		t.Fatal(err)
	}
	// The controller signs with its own credentials; a node has none (its
	// only calls are made with the pod's session).
	wrapper := datakeys.NewWrapper(account.AWSConfig("AKIDCONTROLLER", "controller-secret"))
	unwrapper := datakeys.NewUnwrapper(account.AWSConfig("", ""))
	first := datakeys.Binding{VolumeID: "vol-0123456789abcdef0", Namespace: "shop"}
	restored := datakeys.Binding{VolumeID: "vol-0fedcba9876543210", Namespace: "shop"}

	if err := wrapper.Check(ctx, "alias/volumes", nil, datakeys.Binding{}, first); err != nil {
		t.Fatalf("Check: %v", err)
	}
	w, err := wrapper.Generate(ctx, "alias/volumes", first)
	if err != nil {
		t.Fatalf("Generate: %v", err)
	}
	if w.KeyARN != keyARN || len(w.Ciphertext) == 0 {
		t.Fatalf("Generate = key %s and %d bytes of ciphertext, want key %s", w.KeyARN, len(w.Ciphertext), keyARN)
	}
	request := func(w datakeys.Wrapped, b datakeys.Binding) datakeys.UnwrapRequest {
		return datakeys.UnwrapRequest{
			// moto checks no signature on the token; it must only be a JWT's shape.
			Token:   "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJzeXN0ZW06c2VydmljZWFjY291bnQ6c2hvcDphcHAifQ.c2lnbmF0dXJl",
			RoleARN: "arn:aws:iam::" + account.ID + ":role/app", SessionName: "shop.app",
			KeyID: w.KeyARN, Ciphertext: w.Ciphertext, Binding: b,
		}
	}
	key, err := unwrapper.Unwrap(ctx, request(w, first))
	if err != nil {
		t.Fatalf("Unwrap: %v", err)
	}
	if len(key) != 32 {
		t.Fatalf("a key of %d bytes, want 32", len(key))
	}
	if err := wrapper.Check(ctx, "alias/volumes", &w, first, restored); err != nil {
		t.Fatalf("Check of a rewrap: %v", err)
	}
	rewrapped, err := wrapper.Rewrap(ctx, w, first, "alias/volumes", restored)
	if err != nil {
		t.Fatalf("Rewrap: %v", err)
	}
	again, err := unwrapper.Unwrap(ctx, request(rewrapped, restored))
	if err != nil || !bytes.Equal(again, key) {
		t.Fatalf("the restored volume's key: %v (equal: %t)", err, bytes.Equal(again, key))
	}
	// Bound to its volume: the first volume's key does not open as the
	// restored one's, nor without its namespace.
	for _, b := range []datakeys.Binding{restored, {VolumeID: first.VolumeID}} {
		if _, err := unwrapper.Unwrap(ctx, request(w, b)); err == nil {
			t.Errorf("a key bound to %s unwrapped as %s", first, b)
		} else if !errors.Is(err, datakeys.ErrWrongVolume) && !errors.Is(err, datakeys.ErrAccessDenied) {
			t.Errorf("unwrapping a key bound to %s as %s: %v, want a refusal", first, b, err)
		}
	}
	// Every unwrap assumed the role in moto's STS; two decrypted.
	if got := account.CallsWithCode("AssumeRoleWithWebIdentity", "Success"); got != 4 {
		t.Errorf("%d AssumeRoleWithWebIdentity answered, want 4", got)
	}
	if got := account.CallsWithCode("Decrypt", "Success"); got != 2 {
		t.Errorf("%d Decrypt answered, want 2", got)
	}
}
