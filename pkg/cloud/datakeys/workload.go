package datakeys

import (
	"context"
	"fmt"
	"slices"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsmiddleware "github.com/aws/aws-sdk-go-v2/aws/middleware"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/kms"
	"github.com/aws/aws-sdk-go-v2/service/sts"

	"github.com/diskplane/diskplane/pkg/cloud/sdkhttp"
	"github.com/diskplane/diskplane/pkg/version"
)

// sessionSeconds is how long the credentials STS issues for one unlock
// live: STS's minimum. They are used for one Decrypt and dropped.
const sessionSeconds = 900

// workloadUnwrapper is a node's Unwrapper: STS with the pod's token, then
// KMS with the credentials STS answered.
type workloadUnwrapper struct {
	cfg aws.Config
}

// NewUnwrapper returns a node's Unwrapper. cfg supplies the endpoints
// (AWS_ENDPOINT_URL_STS, AWS_ENDPOINT_URL_KMS or AWS_ENDPOINT_URL) and the
// region used for a key given without an ARN (the node's own); its
// credentials are never used: a node holds none, and every call goes out
// with the pod's.
func NewUnwrapper(cfg aws.Config) Unwrapper {
	cfg = cfg.Copy()
	cfg.Credentials = aws.AnonymousCredentials{}
	return &workloadUnwrapper{cfg: cfg}
}

func (u *workloadUnwrapper) Unwrap(ctx context.Context, r UnwrapRequest) ([]byte, error) {
	fallback := r.Region
	if fallback == "" {
		fallback = u.cfg.Region
	}
	region := regionOf(r.KeyID, fallback)
	if region == "" {
		return nil, fmt.Errorf("%w: no region for KMS key %s: give the key's ARN in the StorageClass", ErrInvalidArgument, r.KeyID)
	}
	stsClient := sts.NewFromConfig(u.cfg, func(o *sts.Options) {
		o.Region = region
		o.Credentials = aws.AnonymousCredentials{}
		o.HTTPClient = sdkhttp.Wrap(o.HTTPClient)
		o.APIOptions = append(slices.Clone(o.APIOptions), awsmiddleware.AddUserAgentKeyValue("diskplane", version.Version()))
	})
	assumed, err := stsClient.AssumeRoleWithWebIdentity(ctx, &sts.AssumeRoleWithWebIdentityInput{
		RoleArn:          aws.String(r.RoleARN),
		RoleSessionName:  aws.String(r.SessionName),
		WebIdentityToken: aws.String(r.Token),
		DurationSeconds:  aws.Int32(sessionSeconds),
	})
	if err != nil {
		return nil, classify(fmt.Sprintf("STS AssumeRoleWithWebIdentity of role %s", r.RoleARN), err)
	}
	c := assumed.Credentials
	if c == nil {
		return nil, fmt.Errorf("STS AssumeRoleWithWebIdentity of role %s: %w: the answer has no credentials", r.RoleARN, ErrUnexpected)
	}
	session := r.RoleARN
	if assumed.AssumedRoleUser != nil {
		session = aws.ToString(assumed.AssumedRoleUser.Arn)
	}
	creds := credentials.NewStaticCredentialsProvider(aws.ToString(c.AccessKeyId), aws.ToString(c.SecretAccessKey), aws.ToString(c.SessionToken))
	out, err := kms.NewFromConfig(u.cfg, kmsOptions(region, creds)).Decrypt(ctx, &kms.DecryptInput{
		CiphertextBlob:    r.Ciphertext,
		KeyId:             aws.String(r.KeyID),
		EncryptionContext: r.Binding.EncryptionContext(),
	})
	if err != nil {
		return nil, classify(fmt.Sprintf("KMS Decrypt of the key of %s with key %s as %s", r.Binding, r.KeyID, session), err)
	}
	return out.Plaintext, nil
}
