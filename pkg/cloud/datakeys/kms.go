package datakeys

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsmiddleware "github.com/aws/aws-sdk-go-v2/aws/middleware"
	"github.com/aws/aws-sdk-go-v2/service/kms"
	"github.com/aws/aws-sdk-go-v2/service/kms/types"

	"github.com/diskplane/diskplane/pkg/cloud/sdkhttp"
	"github.com/diskplane/diskplane/pkg/version"
)

// kmsWrapper is the controller's Wrapper over the KMS API.
type kmsWrapper struct {
	cfg aws.Config
}

// NewWrapper returns the controller's Wrapper for the SDK configuration the
// controller's cloud uses (its region and credentials; the endpoint from
// AWS_ENDPOINT_URL_KMS or AWS_ENDPOINT_URL). A key given by ARN is used in
// the ARN's region. Nothing is sent until the first call.
func NewWrapper(cfg aws.Config) Wrapper {
	return &kmsWrapper{cfg: cfg}
}

// kmsOptions points a KMS client at a key's region and sends as the cloud
// layer does.
func kmsOptions(region string, creds aws.CredentialsProvider) func(*kms.Options) {
	return func(o *kms.Options) {
		o.Region = region
		if creds != nil {
			o.Credentials = creds
		}
		o.HTTPClient = sdkhttp.Wrap(o.HTTPClient)
		o.APIOptions = append(slices.Clone(o.APIOptions), awsmiddleware.AddUserAgentKeyValue("diskplane", version.Version()))
	}
}

func (w *kmsWrapper) client(keyID string) *kms.Client {
	return kms.NewFromConfig(w.cfg, kmsOptions(regionOf(keyID, w.cfg.Region), nil))
}

func (w *kmsWrapper) Generate(ctx context.Context, keyID string, to Binding) (Wrapped, error) {
	out, err := w.client(keyID).GenerateDataKeyWithoutPlaintext(ctx, &kms.GenerateDataKeyWithoutPlaintextInput{
		KeyId:             aws.String(keyID),
		KeySpec:           types.DataKeySpecAes256,
		EncryptionContext: to.EncryptionContext(),
	})
	if err != nil {
		return Wrapped{}, classify(fmt.Sprintf("KMS GenerateDataKeyWithoutPlaintext with key %s for %s", keyID, to), err)
	}
	return Wrapped{KeyARN: aws.ToString(out.KeyId), Ciphertext: out.CiphertextBlob}, nil
}

func (w *kmsWrapper) Rewrap(ctx context.Context, src Wrapped, from Binding, keyID string, to Binding) (Wrapped, error) {
	out, err := w.client(keyID).ReEncrypt(ctx, &kms.ReEncryptInput{
		CiphertextBlob:               src.Ciphertext,
		SourceKeyId:                  aws.String(src.KeyARN),
		SourceEncryptionContext:      from.EncryptionContext(),
		DestinationKeyId:             aws.String(keyID),
		DestinationEncryptionContext: to.EncryptionContext(),
	})
	if err != nil {
		return Wrapped{}, classify(fmt.Sprintf("KMS ReEncrypt of the key of %s (%s) with key %s for %s", from, src.KeyARN, keyID, to), err)
	}
	return Wrapped{KeyARN: aws.ToString(out.KeyId), Ciphertext: out.CiphertextBlob}, nil
}

func (w *kmsWrapper) Check(ctx context.Context, keyID string, source *Wrapped, from, to Binding) error {
	var err error
	if source == nil {
		_, err = w.client(keyID).GenerateDataKeyWithoutPlaintext(ctx, &kms.GenerateDataKeyWithoutPlaintextInput{
			KeyId: aws.String(keyID), KeySpec: types.DataKeySpecAes256, EncryptionContext: to.EncryptionContext(), DryRun: aws.Bool(true),
		})
	} else {
		_, err = w.client(keyID).ReEncrypt(ctx, &kms.ReEncryptInput{
			CiphertextBlob: source.Ciphertext, SourceKeyId: aws.String(source.KeyARN), SourceEncryptionContext: from.EncryptionContext(),
			DestinationKeyId: aws.String(keyID), DestinationEncryptionContext: to.EncryptionContext(), DryRun: aws.Bool(true),
		})
	}
	var dry *types.DryRunOperationException
	if err == nil || errors.As(err, &dry) {
		// DryRunOperationException is KMS's "it would have succeeded"; no
		// error at all is a KMS that ignores DryRun and made a key no one
		// will use, which it allowed all the same.
		return nil
	}
	return classify(fmt.Sprintf("KMS dry run with key %s", keyID), err)
}
