; ptc kernel 9 fused_add_softmax_9  <- %10, %11
define void @fused_add_softmax_9(i64 %begin, i64 %end, ptr noalias %args) {
entry:
  br label %loop
loop:
  %i = phi i64 [ %begin, %entry ], [ %i.next, %loop ]
  ; buf17 = add(buf16, bias)
  %v0 = call float @llvm.ptc.elem(ptr %args, i64 %i, i32 0)
  ; buf18 = max_sum_exp(buf17)
  %v1 = call float @llvm.ptc.elem(ptr %args, i64 %i, i32 1)
  ; buf19 = softmax(buf17)
  %v2 = call float @llvm.ptc.elem(ptr %args, i64 %i, i32 2)
  %i.next = add nuw i64 %i, 1
  %done = icmp eq i64 %i.next, %end
  br i1 %done, label %exit, label %loop
exit:
  ret void
}
